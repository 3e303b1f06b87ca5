/*
 * kernels.c — the compiler's Python surface: compile an expression for given operands
 * into a kernel handle (a capsule around a kernel the module's compiler owns for the
 * module's lifetime), run a kernel, and describe it.  The GIL is released while the
 * compiler and the kernels run; only C structs cross into that region.
 */
#include "py_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL_CAPSULE "scorch.kernel"

int sc_py_kernels_init(sc_py_state *st)
{
    sc_ctx_init(&st->ctx);
    st->compiler = NULL;
    st->include_dir = NULL;
    st->aot_path = NULL;
    st->aot_loaded = 0;
    st->aot_why = NULL;
    st->dl = NULL;
    return 0;
}

void sc_py_kernels_free(sc_py_state *st)
{
    if (st->compiler)
        sc_compiler_free(st->compiler);
    st->compiler = NULL;
    free(st->include_dir);
    st->include_dir = NULL;
    free(st->aot_path);
    st->aot_path = NULL;
}

/* Set a path the compiler is made with (*slot, owned) from args (format "s", or "z":
 * None allowed); what is fixed once the compiler exists. */
static PyObject *set_path(PyObject *module, PyObject *args, const char *format, char **slot,
                          const char *what)
{
    const char *path;
    if (!PyArg_ParseTuple(args, format, &path))
        return NULL;
    if (sc_py_state_of(module)->compiler)
        return PyErr_Format(PyExc_RuntimeError, "%s fixed once a kernel exists", what);
    char *copy = path ? strdup(path) : NULL;
    if (path && !copy)
        return PyErr_NoMemory();
    free(*slot);
    *slot = copy;
    Py_RETURN_NONE;
}

PyObject *sc_py_set_include_dir(PyObject *module, PyObject *args)
{
    return set_path(module, args, "s", &sc_py_state_of(module)->include_dir,
                    "the include dir is");
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
    if (!st->compiler) {
        sc_py_raise(module, &err);
        return NULL;
    }
    /* _compiler._compile transposes an operand once and keeps the copy */
    sc_compiler_set_convert_once(st->compiler, true);
    if (st->aot_path &&
        sc_compiler_load_aot(st->compiler, st->aot_path, &st->aot_loaded, &st->aot_why, &err) != SC_OK) {
        sc_compiler_free(st->compiler);
        st->compiler = NULL;
        sc_py_raise(module, &err);
    }
    return st->compiler;
}

/* An operand description parsed once (prepare) and the description it borrows from, and
 * the epoch it was parsed in. */
typedef struct prepared {
    sc_tensor t;
    PyObject *desc;
    uint64_t epoch;
} prepared;

/* Advanced (new_epoch) when arrays that prepared operands may point into have been moved
 * (torch moving a storage into shared memory frees the old block): an operand prepared
 * in an earlier epoch is never run, the general route prepares it again. */
static uint64_t prepared_epoch;

#define OPERAND_CAPSULE "scorch.operand"

static void free_prepared(PyObject *cap)
{
    prepared *p = PyCapsule_GetPointer(cap, OPERAND_CAPSULE);
    if (p) {
        Py_XDECREF(p->desc);
        free(p);
    }
}

/* desc = (shape, fmt, pos, crd, vals, index[, pos_out, crd_out]) → t, arrays borrowed
 * from desc; pos_out and crd_out, where given, are what an output sharing the tensor's
 * pattern gets for its levels instead of pos and crd (lend_arrays: the caller's own
 * torch tensors, which Python then need not wrap again). */
static int parse_desc(PyObject *module, PyObject *desc, sc_tensor *t)
{
    PyObject *shape, *fmt, *pos, *crd, *vals, *pos_out = NULL, *crd_out = NULL;
    const char *index_name;
    if (!PyArg_ParseTuple(desc, "OOOOOs|OO", &shape, &fmt, &pos, &crd, &vals, &index_name,
                          &pos_out, &crd_out))
        return -1;
    return sc_py_parse_agreeing(module, shape, fmt, pos, crd, vals, index_name, t);
}

/* prepare(desc[, epoch]) -> operand capsule: desc parsed now, and kept alive as long as
 * the capsule, so that a run reads the tensor's arrays without parsing them again.  The
 * capsule belongs to epoch (the current one by default): the caller passes the epoch it
 * read before reading the arrays, so that arrays replaced in between (another thread's
 * copy_, which then advances the epoch) leave the capsule retired. */
PyObject *sc_py_prepare(PyObject *module, PyObject *args)
{
    PyObject *desc;
    unsigned long long epoch = prepared_epoch;
    if (!PyArg_ParseTuple(args, "O!|K", &PyTuple_Type, &desc, &epoch))
        return NULL;
    prepared *p = malloc(sizeof *p);
    if (!p)
        return PyErr_NoMemory();
    if (parse_desc(module, desc, &p->t) < 0) {
        free(p);
        return NULL;
    }
    Py_INCREF(desc);
    p->desc = desc;
    p->epoch = epoch;
    PyObject *cap = PyCapsule_New(p, OPERAND_CAPSULE, free_prepared);
    if (!cap) {
        Py_DECREF(desc);
        free(p);
    }
    return cap;
}

/* epoch() -> the current epoch of prepared operands; new_epoch() advances it. */
PyObject *sc_py_epoch(PyObject *module, PyObject *noargs)
{
    (void)module, (void)noargs;
    return PyLong_FromUnsignedLongLong(prepared_epoch);
}

PyObject *sc_py_new_epoch(PyObject *module, PyObject *noargs)
{
    (void)module, (void)noargs;
    return PyLong_FromUnsignedLongLong(++prepared_epoch);
}

/* Whether cap is a prepared operand of the current epoch. */
static bool current_prepared(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, OPERAND_CAPSULE))
        return false;
    const prepared *p = PyCapsule_GetPointer(cap, OPERAND_CAPSULE);
    return p && p->epoch == prepared_epoch;
}

/* torch.Tensor's DLPack exchange table (type.__dlpack_c_exchange_api__), or NULL where
 * it publishes none, another major version, or no non-owning view. */
static const sc_dl_exchange *dl_exchange_of(PyObject *type)
{
    PyObject *cap = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
    const sc_dl_exchange *api = NULL;
    if (cap && PyCapsule_IsValid(cap, SC_DL_EXCHANGE_CAPSULE))
        api = PyCapsule_GetPointer(cap, SC_DL_EXCHANGE_CAPSULE);
    Py_XDECREF(cap);
    PyErr_Clear();
    if (!api || api->header.version.major != SC_DL_MAJOR ||
        !api->managed_tensor_to_py_object_no_sync || !api->dltensor_from_py_object_no_sync)
        return NULL;
    return api;   /* (the table lives as long as the process) */
}

/* set_torch(torch.float32, torch.float64, torch.int32, torch.int64, torch.from_numpy,
 *           torch.Tensor, scorch.SparseTensor, torch.is_grad_enabled,
 *           torch.get_num_threads, dlpack=True): with dlpack, dense torch.Tensor operands
 * and the arrays of results cross through torch's DLPack exchange table where torch has
 * one (dlpack=False: the attribute and NumPy route, which the tests also run). */
PyObject *sc_py_set_torch(PyObject *module, PyObject *args)
{
    PyObject *refs[SC_PY_TORCH_REFS] = {NULL};
    int dlpack = 1;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO|p", &refs[SC_PY_T_F32], &refs[SC_PY_T_F64],
                          &refs[SC_PY_T_I32], &refs[SC_PY_T_I64], &refs[SC_PY_T_FROM_NUMPY],
                          &refs[SC_PY_T_TENSOR], &refs[SC_PY_T_SPARSE],
                          &refs[SC_PY_T_IS_GRAD_ENABLED], &refs[SC_PY_T_GET_NUM_THREADS],
                          &dlpack))
        return NULL;
    if (!PyType_Check(refs[SC_PY_T_TENSOR]) || !PyType_Check(refs[SC_PY_T_SPARSE])) {
        PyErr_SetString(PyExc_TypeError, "set_torch: torch.Tensor and SparseTensor are types");
        return NULL;
    }
    static const char *const names[] = {"dtype", "shape", "data_ptr", "is_contiguous",
                                        "is_cpu", "is_neg", "requires_grad", "_kernels",
                                        "_desc", "_vals", "_version"};
    for (int i = SC_PY_T_DTYPE; i < SC_PY_TORCH_REFS; i++) {
        refs[i] = PyUnicode_InternFromString(names[i - SC_PY_T_DTYPE]);
        if (!refs[i]) {
            while (--i >= SC_PY_T_DTYPE)
                Py_DECREF(refs[i]);
            return NULL;
        }
    }
    sc_py_state *st = sc_py_state_of(module);
    for (int i = 0; i < SC_PY_TORCH_REFS; i++) {
        if (i < SC_PY_T_DTYPE)
            Py_INCREF(refs[i]);
        Py_XSETREF(st->torch[i], refs[i]);
    }
    st->dl = dlpack ? dl_exchange_of(refs[SC_PY_T_TENSOR]) : NULL;
    Py_RETURN_NONE;
}

/* A boolean attribute (method: called) of x: 1, 0, or -1 with an error set. */
static int torch_flag(PyObject *x, PyObject *name, bool call)
{
    PyObject *r = call ? PyObject_CallMethodNoArgs(x, name) : PyObject_GetAttr(x, name);
    if (!r)
        return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

/* What parse_torch_dense reads of a tensor, by either route. */
typedef struct dense_facts {
    int usable;          /* CPU, contiguous, no negative view bit: 1, 0, or -1 (error set) */
    int dtype;           /* an sc_dtype, or -1 for one scorch does not take */
    int32_t order;       /* dimensions, SC_MAX_ORDER + 1 for more than scorch takes */
    int64_t dims[SC_MAX_ORDER];
    void *data;
} dense_facts;

/* x's facts through torch's Python attributes (scorch does not link against torch). */
static int dense_facts_attrs(PyObject *const *T, PyObject *x, dense_facts *f)
{
    /* (a negated view's memory holds the values before negation) */
    f->usable = torch_flag(x, T[SC_PY_T_IS_CPU], false);
    f->usable = f->usable == 1 ? torch_flag(x, T[SC_PY_T_IS_CONTIGUOUS], true) : f->usable;
    f->usable = f->usable == 1 ? !torch_flag(x, T[SC_PY_T_IS_NEG], true) : f->usable;
    if (f->usable != 1)
        return 0;
    PyObject *dtype = PyObject_GetAttr(x, T[SC_PY_T_DTYPE]);
    if (!dtype)
        return -1;
    Py_DECREF(dtype); /* (the dtype objects are singletons that torch keeps alive) */
    f->dtype = dtype == T[SC_PY_T_F32] ? SC_DTYPE_F32 : dtype == T[SC_PY_T_F64] ? SC_DTYPE_F64
             : dtype == T[SC_PY_T_I32] ? SC_DTYPE_I32 : dtype == T[SC_PY_T_I64] ? SC_DTYPE_I64
             : -1;
    if (f->dtype < 0)
        return 0;
    PyObject *shape = PyObject_GetAttr(x, T[SC_PY_T_SHAPE]);
    if (!shape)
        return -1;
    Py_ssize_t n = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : SC_MAX_ORDER + 1;
    f->order = (int32_t)(n <= SC_MAX_ORDER ? n : SC_MAX_ORDER + 1);
    for (int32_t d = 0; d < f->order && d < SC_MAX_ORDER; d++) {
        f->dims[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        if (PyErr_Occurred()) {
            Py_DECREF(shape);
            return -1;
        }
    }
    Py_DECREF(shape);
    PyObject *ptr = PyObject_CallMethodNoArgs(x, T[SC_PY_T_DATA_PTR]);
    if (!ptr)
        return -1;
    f->data = PyLong_AsVoidPtr(ptr);
    Py_DECREF(ptr);
    return PyErr_Occurred() ? -1 : 0;
}

/* x's facts through torch's DLPack exchange table (x exactly a torch.Tensor): one call
 * into torch where the attribute route makes six, which matters on a cold cache. */
static int dense_facts_dl(PyObject *const *T, const sc_dl_exchange *dl, PyObject *x,
                          dense_facts *f)
{
    sc_dl_tensor v;
    if (dl->dltensor_from_py_object_no_sync(x, &v) < 0)
        return -1;
    /* row-major as torch's is_contiguous() has it: a dimension of size 1 may have any
     * stride, and an empty tensor is contiguous */
    int64_t want = 1;
    bool contiguous = true;
    for (int32_t d = v.ndim - 1; d >= 0 && v.strides; d--) {
        contiguous = contiguous && (v.shape[d] == 1 || v.strides[d] == want);
        if (!sc_mul_ok(want, v.shape[d], &want))
            contiguous = false;
    }
    f->usable = v.device.type == SC_DL_CPU && (contiguous || want == 0);
    /* (the view does not carry torch's negative bit) */
    f->usable = f->usable == 1 ? !torch_flag(x, T[SC_PY_T_IS_NEG], true) : f->usable;
    if (f->usable != 1)
        return 0;
    bool wide = v.dtype.bits == 64;
    f->dtype = v.dtype.lanes != 1 || (v.dtype.bits != 32 && !wide) ? -1
             : v.dtype.code == SC_DL_FLOAT ? (wide ? SC_DTYPE_F64 : SC_DTYPE_F32)
             : v.dtype.code == SC_DL_INT ? (wide ? SC_DTYPE_I64 : SC_DTYPE_I32) : -1;
    f->order = v.ndim <= SC_MAX_ORDER ? v.ndim : SC_MAX_ORDER + 1;
    for (int32_t d = 0; d < f->order && d < SC_MAX_ORDER; d++)
        f->dims[d] = v.shape[d];
    f->data = (char *)v.data + v.byte_offset;
    return 0;
}

/* A dense, contiguous CPU torch.Tensor of float32/float64/int32/int64 → t (all-dense
 * levels in order), its data borrowed from x; read through torch's DLPack exchange table
 * where torch has one and x is a plain torch.Tensor, else through its attributes. */
static int parse_torch_dense(PyObject *module, Py_ssize_t i, PyObject *x, sc_tensor *t)
{
    const sc_py_state *st = sc_py_state_of(module);
    PyObject *const *T = st->torch;
    if (!T[SC_PY_T_F32]) {
        PyErr_SetString(PyExc_RuntimeError, "scorch._C.set_torch was not called");
        return -1;
    }
    memset(t, 0, sizeof *t);
    dense_facts f = {.usable = 0, .dtype = -1, .order = -1, .data = NULL};
    int rc = 1;
    if (st->dl && Py_TYPE(x) == (PyTypeObject *)T[SC_PY_T_TENSOR]) {
        rc = dense_facts_dl(T, st->dl, x, &f);
        if (rc < 0 && PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();   /* (what DLPack cannot describe, a meta tensor: the attributes
                                say what is wrong as for any tensor) */
            rc = 1;
        }
    }
    if (rc == 1)
        rc = dense_facts_attrs(T, x, &f);
    if (rc < 0 || f.usable < 0)
        return -1;
    if (!f.usable) {
        PyErr_Format(PyExc_ValueError, "operand %zd: a dense operand must be a contiguous "
                     "CPU tensor without a negative view bit", i);
        return -1;
    }
    if (f.dtype < 0) {
        PyErr_Format(PyExc_TypeError, "operand %zd: values must be float32, float64, int32 "
                     "or int64", i);
        return -1;
    }
    if (f.order < 1 || f.order > SC_MAX_ORDER) {
        PyErr_Format(PyExc_ValueError, "operand %zd: a dense operand needs 1..%d dimensions",
                     i, SC_MAX_ORDER);
        return -1;
    }
    int64_t total = 1;
    for (int32_t d = 0; d < f.order; d++) {
        if (f.dims[d] < 0) {
            PyErr_Format(PyExc_ValueError, "operand %zd: negative size", i);
            return -1;
        }
        if (!sc_mul_ok(total, f.dims[d], &total)) {
            PyErr_Format(PyExc_ValueError, "operand %zd: size overflows", i);
            return -1;
        }
        t->dims[d] = f.dims[d];
    }
    t->dtype = (sc_dtype)f.dtype;
    t->vals = f.data;
    t->nvals = total;
    t->index_type = SC_INDEX_I32;
    sc_fmt_dense(f.order, &t->fmt);
    return 0;
}

/* ops: a list whose items are operand descriptions (shape, fmt, pos, crd, vals, index),
 * prepared operands (capsules), or dense contiguous torch tensors → t[0..n-1]. */
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
        PyObject *o = PyList_GET_ITEM(ops, i);
        if (PyTuple_Check(o)) {
            if (parse_desc(module, o, &t[i]) < 0)
                return -1;
        } else if (PyCapsule_CheckExact(o)) {
            prepared *p = PyCapsule_GetPointer(o, OPERAND_CAPSULE);
            if (!p)
                return -1;
            t[i] = p->t;
        } else if (parse_torch_dense(module, i, o, &t[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* A compile request's operands and output format (outp: &out_fmt, or NULL for None). */
typedef struct request {
    sc_tensor t[SC_PY_MAX_OPERANDS];
    Py_ssize_t n;
    sc_format out_fmt;
    const sc_format *outp;
} request;

/* Parse ops and out_fmt_o into rq; the module's compiler, or NULL with an error set. */
static sc_compiler *parse_request(PyObject *module, PyObject *ops, PyObject *out_fmt_o,
                                  request *rq)
{
    rq->outp = NULL;
    if (parse_ops(module, ops, rq->t, &rq->n) < 0)
        return NULL;
    if (out_fmt_o != Py_None) {
        if (sc_py_parse_fmt(module, out_fmt_o, &rq->out_fmt) < 0)
            return NULL;
        rq->outp = &rq->out_fmt;
    }
    return get_compiler(module);
}

/* set_aot(path or None): the ahead-of-time kernels the compiler loads when it is made. */
PyObject *sc_py_set_aot(PyObject *module, PyObject *args)
{
    return set_path(module, args, "z", &sc_py_state_of(module)->aot_path,
                    "the ahead-of-time kernels are");
}

/* aot_info() -> (path or None, kernels loaded, why none or None); makes the compiler. */
PyObject *sc_py_aot_info(PyObject *module, PyObject *args)
{
    (void)args;
    if (!get_compiler(module))
        return NULL;
    sc_py_state *st = sc_py_state_of(module);
    return Py_BuildValue("(znz)", st->aot_path, (Py_ssize_t)st->aot_loaded, st->aot_why);
}

PyObject *sc_py_host_isa(PyObject *module, PyObject *args)
{
    (void)module;
    (void)args;
    char hex[33];
    sc_jit_key_hex(sc_jit_host_isa(), hex);
    return PyUnicode_FromString(hex);
}

#define LATER_CAPSULE "scorch.later"

/* compile(lang, expr, ops, out_fmt or None, schedule or None, sizes=True, later=False) ->
 * kernel capsule (sizes=False: generic in every size, sc_compile_sized); with later,
 * (kernel capsule, later capsule or None): sc_compile_later. */
PyObject *sc_py_compile(PyObject *module, PyObject *args)
{
    int lang;
    const char *expr, *schedule = NULL;
    PyObject *ops, *out_fmt_o;
    int sizes = 1, want_later = 0;
    if (!PyArg_ParseTuple(args, "isOOz|pp", &lang, &expr, &ops, &out_fmt_o, &schedule, &sizes,
                          &want_later))
        return NULL;
    request rq;
    sc_compiler *c = parse_request(module, ops, out_fmt_o, &rq);
    if (!c)
        return NULL;
    const sc_kernel *k = NULL;
    sc_later *later = NULL;
    sc_error err;
    sc_status st;
    sc_expr_lang l = lang ? SC_EXPR_LANG_INDEX : SC_EXPR_LANG_EINSUM;
    Py_BEGIN_ALLOW_THREADS
    if (want_later)
        st = sc_compile_later(c, l, expr, (int32_t)rq.n, rq.t, rq.outp, schedule, sizes != 0, &k,
                              &later, &err);
    else
        st = sc_compile_sized(c, l, expr, (int32_t)rq.n, rq.t, rq.outp, schedule, sizes != 0, &k,
                              &err);
    Py_END_ALLOW_THREADS
    if (st != SC_OK)
        return sc_py_raise_at(module, &err, err.stage && !strcmp(err.stage, "schedule")
                                                  ? schedule : expr);
    PyObject *kc = PyCapsule_New((void *)k, KERNEL_CAPSULE, NULL);
    if (!kc || !want_later)
        return kc;
    PyObject *lc = later ? PyCapsule_New(later, LATER_CAPSULE, NULL) : Py_NewRef(Py_None);
    if (!lc) {
        Py_DECREF(kc);
        return NULL;
    }
    PyObject *r = PyTuple_Pack(2, kc, lc);
    Py_DECREF(kc);
    Py_DECREF(lc);
    return r;
}

/* later_poll(later, wait=False) -> the kernel capsule once compiled, None while it
 * compiles; raises the compiler's error when it failed. */
PyObject *sc_py_later_poll(PyObject *module, PyObject *args)
{
    PyObject *cap;
    int wait = 0;
    if (!PyArg_ParseTuple(args, "O|p", &cap, &wait))
        return NULL;
    sc_later *l = PyCapsule_GetPointer(cap, LATER_CAPSULE);
    if (!l)
        return NULL;
    const sc_kernel *k = NULL;
    sc_error err;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = sc_later_poll(l, wait != 0, &k, &err);
    Py_END_ALLOW_THREADS
    if (r < 0)
        return sc_py_raise(module, &err);
    if (r == 0)
        Py_RETURN_NONE;
    return PyCapsule_New((void *)k, KERNEL_CAPSULE, NULL);
}

/* source(lang, expr, ops, out_fmt or None, schedule or None, sizes, gathers) ->
 * (key hex, symbol, C source, its hash hex): sc_compile_source. */
PyObject *sc_py_source(PyObject *module, PyObject *args)
{
    int lang, sizes, gathers;
    const char *expr, *schedule = NULL;
    PyObject *ops, *out_fmt_o;
    if (!PyArg_ParseTuple(args, "isOOzpi", &lang, &expr, &ops, &out_fmt_o, &schedule, &sizes,
                          &gathers))
        return NULL;
    request rq;
    sc_compiler *c = parse_request(module, ops, out_fmt_o, &rq);
    if (!c)
        return NULL;
    sc_source src;
    sc_error err;
    sc_status st = sc_compile_source(c, lang ? SC_EXPR_LANG_INDEX : SC_EXPR_LANG_EINSUM, expr,
                                     (int32_t)rq.n, rq.t, rq.outp, schedule, sizes != 0, gathers,
                                     &src, &err);
    if (st != SC_OK)
        return sc_py_raise_at(module, &err, expr);
    char hex[33], text_hex[33];
    sc_jit_key_hex(src.key, hex);
    sc_jit_key_hex(src.hash, text_hex);
    PyObject *r = Py_BuildValue("(ssy#s)", hex, src.symbol, src.text, (Py_ssize_t)src.len, text_hex);
    sc_source_release(c, &src);
    return r;
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

/* All levels dense, in dimension order. */
static bool row_major_dense(const sc_format *f)
{
    for (int32_t l = 0; l < f->order; l++)
        if (f->kind[l] != SC_LEVEL_DENSE || f->lvl2dim[l] != l)
            return false;
    return f->order > 0;
}

/* The arrays (new references) of the operand descriptions that out's borrowed levels
 * share: lent[2l], lent[2l + 1] are pos and crd of level l (left NULL where not found:
 * sc_py_tensor_result then raises). */
static void lend_arrays(PyObject *const *descs, const sc_tensor *const *t, Py_ssize_t n,
                        const sc_tensor *out, PyObject **lent)
{
    for (int32_t l = 0; l < out->fmt.order; l++) {
        int32_t j, i = (out->borrowed >> l) & 1u ? sc_tensor_lender(t, (int32_t)n, out, l, &j) : -1;
        if (i < 0)
            continue;
        PyObject *desc = descs[i];
        if (PyCapsule_CheckExact(desc)) {
            prepared *p = PyCapsule_GetPointer(desc, OPERAND_CAPSULE);
            desc = p ? p->desc : NULL;
        }
        if (!desc || !PyTuple_Check(desc) || PyTuple_GET_SIZE(desc) < 4)
            continue;
        int at = PyTuple_GET_SIZE(desc) >= 8 ? 6 : 2; /* the desc's pos_out, crd_out */
        lent[2 * l] = PySequence_GetItem(PyTuple_GET_ITEM(desc, at), j);
        lent[2 * l + 1] = PySequence_GetItem(PyTuple_GET_ITEM(desc, at + 1), j);
        PyErr_Clear();
    }
}

/* Run k on t[0..n-1] (parsed from descs[0..n-1], which keep their arrays alive) → the
 * output as (shape, (pos, crd, vals)), or with as_torch, an output whose levels are dense
 * in dimension order as a torch.Tensor of its shape (owning the kernel's array, no copy). */
static PyObject *run_parsed(PyObject *module, const sc_kernel *k, PyObject *const *descs,
                            sc_tensor *t, Py_ssize_t n, int threads, bool as_torch)
{
    const sc_tensor *tp[SC_PY_MAX_OPERANDS];
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
    const sc_py_state *state = sc_py_state_of(module);
    PyObject *from_numpy = state->torch[SC_PY_T_FROM_NUMPY];
    const sc_dl_exchange *dl = as_torch ? state->dl : NULL;
    if (as_torch && from_numpy && row_major_dense(&out.fmt)) {
        PyObject *arr = sc_py_dense_result(&out, dl); /* takes out's arrays */
        if (!arr || Py_TYPE(arr) == (PyTypeObject *)state->torch[SC_PY_T_TENSOR])
            return arr;
        PyObject *r = PyObject_CallOneArg(from_numpy, arr);
        Py_DECREF(arr);
        return r;
    }
    PyObject *shape = dims_tuple(out.fmt.order, out.dims);
    if (!shape) {
        sc_ctx ctx;
        sc_ctx_init(&ctx);
        sc_tensor_release(&ctx, &out);
        return NULL;
    }
    PyObject *lent[2 * SC_MAX_ORDER] = {NULL};
    if (out.borrowed)
        lend_arrays(descs, tp, n, &out, lent);
    PyObject *arrays = sc_py_tensor_result(&out, lent, dl); /* takes out's own arrays */
    for (int32_t i = 0; i < 2 * SC_MAX_ORDER; i++)
        Py_XDECREF(lent[i]);
    if (!arrays) {
        Py_DECREF(shape);
        return NULL;
    }
    return Py_BuildValue("(NN)", shape, arrays);
}

/* run(kernel, ops, threads, as_torch=False) -> (shape, (pos, crd, vals)) of the output;
 * with as_torch, an output whose levels are dense in dimension order comes back as a
 * torch.Tensor of its shape instead (owning the kernel's array, no copy). */
PyObject *sc_py_run(PyObject *module, PyObject *args)
{
    PyObject *cap, *ops;
    int threads, as_torch = 0;
    if (!PyArg_ParseTuple(args, "OOi|p", &cap, &ops, &threads, &as_torch))
        return NULL;
    const sc_kernel *k = kernel_of(cap);
    if (!k)
        return NULL;
    sc_tensor t[SC_PY_MAX_OPERANDS];
    Py_ssize_t n;
    if (parse_ops(module, ops, t, &n) < 0)
        return NULL;
    return run_parsed(module, k, PySequence_Fast_ITEMS(ops), t, n, threads, as_torch != 0);
}

/* An attribute of x (new reference), NULL with an error set. */
#define GET(x, name) PyObject_GetAttr((x), T[name])

/* requires_grad of x: 1, 0, or -1 with an error set. */
static int requires_grad(PyObject *const *T, PyObject *x)
{
    return torch_flag(x, T[SC_PY_T_REQUIRES_GRAD], false);
}

/* Whether every (array, version) pair of checked (a prepared operand's index arrays and
 * the versions they were checked at, _compiler._sparse_operand) still holds: 1, 0 (an
 * array written in place since: the general route raises), -1 with an error set (the
 * caller then goes to the general route too, whose label clears it). */
static int unwritten(PyObject *const *T, PyObject *checked)
{
    if (!PyTuple_CheckExact(checked))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(checked); i++) {
        PyObject *pair = PyTuple_GET_ITEM(checked, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return 0;
        PyObject *version = GET(PyTuple_GET_ITEM(pair, 0), SC_PY_T_VERSION);
        if (!version)
            return -1;
        int same = PyObject_RichCompareBool(version, PyTuple_GET_ITEM(pair, 1), Py_EQ);
        Py_DECREF(version);
        if (same != 1)
            return same;
    }
    return 1;
}

/* remembered(key, ops) -> the result of the kernel that ops[0], a SparseTensor, remembers
 * under key (its _kernels[key] = (len(ops), entry), set by _compiler._remembered_run) run
 * on its prepared operand (_desc[0]) and the plain torch.Tensors ops[1:]; or, where the
 * kernel reads a converted copy of ops[0] (a transposed or DCSR copy, _compiler._transposed:
 * _kernels[key] = (len(ops), entry, the copy's prepared operand, ops[0]'s values version
 * when it was made, its values tensor then, and its index arrays' versions)), on that
 * copy while the values are that tensor at that version (a copy_ of another pattern
 * replaces the tensor) and no index array was written since; ops[0]'s own prepared
 * operand likewise (_desc[3]: its index arrays' versions); None where the
 * general route must run the call: no such kernel, another operand type, autograd
 * recording (an operand requires grad in grad mode), or an operand the kernel does not
 * take as it is (a dtype to promote, a strided view, other fixed sizes).  A result whose
 * levels are dense in dimension order comes back as a torch.Tensor, another as
 * (entry, (shape, (pos, crd, vals))) for the Python layer to wrap.  The Python route
 * would run the same kernel on the same operands; this one only skips its bookkeeping
 * (each Python step costs far more on a cold cache than a small kernel). */
PyObject *sc_py_remembered(PyObject *module, PyObject *args)
{
    PyObject *key, *ops;
    if (!PyArg_ParseTuple(args, "OO!", &key, &PyTuple_Type, &ops))
        return NULL;
    PyObject *const *T = sc_py_state_of(module)->torch;
    Py_ssize_t n = PyTuple_GET_SIZE(ops);
    if (!T[SC_PY_T_SPARSE] || n < 1 || n > SC_PY_MAX_OPERANDS)
        Py_RETURN_NONE;
    PyObject *a = PyTuple_GET_ITEM(ops, 0);
    if (Py_TYPE(a) != (PyTypeObject *)T[SC_PY_T_SPARSE])
        Py_RETURN_NONE;
    for (Py_ssize_t i = 1; i < n; i++)
        if (Py_TYPE(PyTuple_GET_ITEM(ops, i)) != (PyTypeObject *)T[SC_PY_T_TENSOR])
            Py_RETURN_NONE;
    PyObject *result = NULL, *entry = NULL, *prepared_op = NULL;
    PyObject *memo = GET(a, SC_PY_T_KERNELS);
    if (!memo)
        return NULL;
    PyObject *hit = PyDict_CheckExact(memo) ? PyDict_GetItemWithError(memo, key) : NULL;
    if (!hit || !PyTuple_CheckExact(hit) ||
        (PyTuple_GET_SIZE(hit) != 2 && PyTuple_GET_SIZE(hit) != 6) ||
        PyLong_AsSsize_t(PyTuple_GET_ITEM(hit, 0)) != n)
        goto general;   /* (an unhashable key is an error the general route reports) */
    entry = PyTuple_GET_ITEM(hit, 1);
    Py_INCREF(entry);
    PyObject *vals = GET(a, SC_PY_T_VALUES);
    if (!vals)
        goto general;
    if (PyTuple_GET_SIZE(hit) == 6) {   /* a converted copy, valid for one values version */
        if (vals != PyTuple_GET_ITEM(hit, 4)) {
            Py_DECREF(vals);
            goto general;
        }
        PyObject *version = GET(vals, SC_PY_T_VERSION);
        int same = version ? PyObject_RichCompareBool(version, PyTuple_GET_ITEM(hit, 3), Py_EQ)
                           : -1;
        Py_XDECREF(version);
        if (same == 1 && current_prepared(PyTuple_GET_ITEM(hit, 2)) &&
            unwritten(T, PyTuple_GET_ITEM(hit, 5)) == 1)
            prepared_op = Py_NewRef(PyTuple_GET_ITEM(hit, 2));
    } else {
        PyObject *desc = GET(a, SC_PY_T_DESC);
        if (desc && PyTuple_CheckExact(desc) && PyTuple_GET_SIZE(desc) == 4 &&
            current_prepared(PyTuple_GET_ITEM(desc, 0)) &&
            unwritten(T, PyTuple_GET_ITEM(desc, 3)) == 1)
            prepared_op = Py_NewRef(PyTuple_GET_ITEM(desc, 0));
        Py_XDECREF(desc);
    }
    if (!prepared_op || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < 1) {
        Py_DECREF(vals);
        goto general;
    }
    /* autograd: records when an operand requires grad and grad mode is on */
    int grad = requires_grad(T, vals);
    Py_DECREF(vals);
    for (Py_ssize_t i = 1; i < n && grad == 0; i++)
        grad = requires_grad(T, PyTuple_GET_ITEM(ops, i));
    if (grad == 1) {
        PyObject *on = PyObject_CallNoArgs(T[SC_PY_T_IS_GRAD_ENABLED]);
        grad = on ? PyObject_IsTrue(on) : -1;
        Py_XDECREF(on);
    }
    if (grad != 0)
        goto general;
    const sc_kernel *k = kernel_of(PyTuple_GET_ITEM(entry, 0));
    if (!k)
        goto general;
    PyObject *nt = PyObject_CallNoArgs(T[SC_PY_T_GET_NUM_THREADS]);
    long threads = nt ? PyLong_AsLong(nt) : -1;
    Py_XDECREF(nt);
    if (threads < 0 || threads > INT_MAX)
        goto general;
    sc_tensor t[SC_PY_MAX_OPERANDS];
    PyObject *descs[SC_PY_MAX_OPERANDS];
    t[0] = ((prepared *)PyCapsule_GetPointer(prepared_op, OPERAND_CAPSULE))->t;
    descs[0] = prepared_op;
    for (Py_ssize_t i = 1; i < n; i++) {
        descs[i] = PyTuple_GET_ITEM(ops, i);
        if (parse_torch_dense(module, i, descs[i], &t[i]) < 0)
            goto general;
    }
    PyObject *r = run_parsed(module, k, descs, t, n, (int)threads, true);
    if (r && PyTuple_CheckExact(r)) {
        result = PyTuple_Pack(2, entry, r);
        Py_DECREF(r);
    } else {
        result = r;
    }
general:
    /* Ordinary failures (a size or dtype the kernel does not take, an attribute torch
     * refuses) leave the call to the general route, which says what is wrong where
     * that is an error; KeyboardInterrupt and the like go on up. */
    if (!result && (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_Exception))) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
    }
    Py_XDECREF(prepared_op);
    Py_XDECREF(entry);
    Py_DECREF(memo);
    return result;
}

#undef GET

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

/* kernel_fixed(kernel) -> ((operand, dim, size), ...): the sizes the kernel is written for */
PyObject *sc_py_kernel_fixed(PyObject *module, PyObject *args)
{
    (void)module;
    const sc_kernel *k = kernel_arg(args);
    if (!k)
        return NULL;
    enum { MAX = SC_PY_MAX_OPERANDS * SC_MAX_ORDER };
    int32_t op[MAX], dim[MAX];
    int64_t size[MAX];
    int32_t n = sc_kernel_fixed(k, MAX, op, dim, size);
    if (n > MAX)
        n = MAX;
    PyObject *r = PyTuple_New(n);
    for (int32_t i = 0; r && i < n; i++) {
        PyObject *item = Py_BuildValue("(iiL)", (int)op[i], (int)dim[i], (long long)size[i]);
        if (!item) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SET_ITEM(r, i, item);
    }
    return r;
}

/* kernel_times(kernel) -> (front-end microseconds, jit microseconds, ahead of time) */
PyObject *sc_py_kernel_times(PyObject *module, PyObject *args)
{
    (void)module;
    const sc_kernel *k = kernel_arg(args);
    if (!k)
        return NULL;
    double f, j;
    sc_kernel_times(k, &f, &j);
    return Py_BuildValue("(ddO)", f, j, sc_kernel_ahead(k) ? Py_True : Py_False);
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
