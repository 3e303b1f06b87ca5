"""SparseTensor: a torch.Tensor subclass whose data are level arrays and values.

The arrays are ordinary torch tensors (memory owned by torch): ``_pos[k]`` and ``_crd[k]``
per level (None where the level kind has none) and ``_vals``.  The wrapper itself has no
storage; torch sees its shape, dtype and device.  Every conversion runs in the C core.
"""
from __future__ import annotations

import collections
import copy
import functools
import os
import re
import sys
import warnings

import numpy as np
import torch

from . import _C
from ._format import Format

_INDEX_NAMES = {torch.int32: "int32", torch.int64: "int64"}
_INDEX_OF_NAME = {v: k for k, v in _INDEX_NAMES.items()}
# The dtypes generated kernels compute in, and those a SparseTensor may store: bfloat16
# and float16 values are computed in float32 (each kernel call reads a float32 copy of
# them and rounds its result back once), as ATen's CPU kernels accumulate half types in
# float32.  int32 and int64 values are computed as they are, wrapping on overflow as
# torch's integer kernels do; int16, int8 and uint8 values in int32, the result narrowed
# once (+, - and * modulo 2^32 then narrowed are the same as modulo 2^16 or 2^8 at every
# step, torch's wrap-around in those dtypes).
INT_DTYPES = (torch.int32, torch.int64)
COMPUTE_DTYPES = (torch.float32, torch.float64) + INT_DTYPES
HALF_DTYPES = (torch.bfloat16, torch.float16)
# the dtypes stored narrower than the kernels compute them, and what they compute in
WIDENED = {**dict.fromkeys(HALF_DTYPES, torch.float32),
           **dict.fromkeys((torch.int16, torch.int8, torch.uint8), torch.int32)}
VALUE_DTYPES = COMPUTE_DTYPES + tuple(WIDENED)
VALUE_DTYPE_NAMES = "float32, float64, bfloat16, float16, int64, int32, int16, int8 or uint8"


def compute_dtype(dtype):
    """The dtype a kernel computes ``dtype`` values in."""
    return WIDENED.get(dtype, dtype)


def c_values(v: torch.Tensor):
    """A NumPy array of values v in the dtype the C core computes them in (a copy for the
    WIDENED dtypes, else v's own memory)."""
    v = v.detach()
    if v.dtype in WIDENED:
        v = v.to(WIDENED[v.dtype])
    return v.contiguous().numpy()


def _np(t):
    """A NumPy view of a contiguous CPU tensor (None stays None)."""
    return None if t is None else t.detach().numpy()


def _torch(a):
    """A torch tensor sharing NumPy array a's memory; a torch tensor (an operand's index
    array lent to an output with its pattern) or None as it is."""
    return a if a is None or type(a) is torch.Tensor else torch.from_numpy(a)


def _threads() -> int:
    return torch.get_num_threads()


# OpenMP's worker threads do not survive fork: in a child of a process whose pool had
# started, the first parallel region hangs — scorch's kernels and conversions and
# torch's own ops alike — even one asking for a single thread, unless the child's
# OpenMP thread count is 1, which is what DataLoader sets in its workers.  A child of a
# process that had more than one thread at the fork gets that count (the pool's threads
# stay alive between regions); it may raise it again where it knows better.
_threads_at_fork = 1


def _before_fork():
    global _threads_at_fork
    try:
        _threads_at_fork = len(os.listdir("/proc/self/task"))
    except OSError:
        _threads_at_fork = 2   # unknown: assume a pool


def _after_fork_in_child():
    if _threads_at_fork > 1:
        torch.set_num_threads(1)


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


# Under torch.compile, Dynamo inlines scorch's Python code and would reach the
# extension's functions, which it cannot trace: each is a graph break with a warning of
# its own.  Where Dynamo is tracing (is_compiling() is True only then), scorch's ops and
# public functions go through a function torch.compiler.disable wraps instead: one graph
# break, no warning, the call run eagerly as outside torch.compile.
#
# Nothing can be tracing until something loads torch._dynamo (torch.compile does; an
# import of torch or scorch does not), so until then the check is ``bool()``: False from
# a builtin, no Python frame (torch.compiler.is_compiling is two, 1.5-2.7 us of a cold
# SDDMM call after a 64 MB sweep).  A finder on sys.meta_path that finds nothing sees
# torch._dynamo's import go by and arms the real check (_arm_compile_checks).
_compiling = bool
_CHECKED = ("scorch._tensor", "scorch._torch_ops", "scorch._compiler")   # (their _compiling)


def _arm_compile_checks():
    for name in _CHECKED:
        mod = sys.modules.get(name)
        if mod is not None:
            mod._compiling = torch.compiler.is_compiling


class _DynamoWatch:
    """A sys.meta_path finder: it arms the torch.compile checks when torch._dynamo is
    first imported, and hands back the spec the other finders give, its loader set to
    skip scorch's entry frames once the module has run (_skip_call_frames)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "torch._dynamo":
            return None
        _arm_compile_checks()
        for finder in sys.meta_path:
            spec = None if finder is _DynamoWatch or not hasattr(finder, "find_spec") \
                else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            _skip_call_frames()
        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            pass
        return spec


def watch_for_dynamo():
    """Arm the torch.compile checks now where torch._dynamo is loaded, else when it is
    (the package calls this once its modules are imported)."""
    if "torch._dynamo" in sys.modules:
        _arm_compile_checks()
        _skip_call_frames()
    elif _DynamoWatch not in sys.meta_path:
        sys.meta_path.insert(0, _DynamoWatch)


def outside(fn):
    """``fn`` wrapped by torch.compiler.disable, made on first use (under tracing, when
    torch._dynamo is loaded already: importing it costs 0.8 s, which an import of scorch
    should not pay).  torch.export is refused here: it traces what runs, and a kernel
    reads the tensors' arrays, which its fake tensors do not have."""
    if torch.compiler.is_exporting():
        raise NotImplementedError(
            "torch.export cannot trace scorch's sparse tensors: their kernels are compiled "
            "C run on the tensors' index and value arrays, not torch ops. Export a dense "
            "model instead (a SparseLinear's weight.to_dense() as an nn.Linear's weight), "
            "or use torch.compile, which runs scorch's calls eagerly between its graphs")
    off = _OUTSIDE.get(fn)
    if off is None:
        off = _OUTSIDE[fn] = torch.compiler.disable(fn)
    return off


_OUTSIDE: dict = {}


def _skip_call_frames():
    """torch.compile never compiles the frames of scorch's entry points (``outside_graph``'s
    wrapper, ``outside``, ``SparseTensor.__torch_function__`` and ``__matmul__``), nor
    those they call.  After a graph break at one, dynamo compiled its frame and guarded on
    the function it was given: one code object for every wrapped function, so each
    function, shape and grad mode recompiled it until dynamo's recompile limit warned.
    Those frames call scorch eagerly anyway.  (torch's own mechanism behind ``skip_code``,
    made recursive; where this torch lacks it, the frames compile as before.)"""
    try:
        from torch._C._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
        skip = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
        for code in (_WRAPPER_CODE, outside.__code__, SparseTensor.__matmul__.__code__,
                     SparseTensor.__torch_function__.__func__.__code__):
            set_code_exec_strategy(code, skip)
    except Exception:   # (not this torch's API: the frames compile as before)
        pass


def outside_graph(fn):
    """``fn``, which torch.compile runs outside the graph it traces (a graph break) and
    everything else calls as it is (the check costs ~0.05 us a call)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        return outside(fn)(*args, **kwargs) if _compiling() else fn(*args, **kwargs)
    return call


_WRAPPER_CODE = outside_graph(len).__code__   # (the code object every wrapper shares)


def index_versions(arrays) -> tuple:
    """The versions of the index arrays in a level-array list (None where there is no
    array), None for an array torch counts no versions of (made in inference mode)."""
    return tuple(None if x is None or x.is_inference() else x._version for x in arrays)


def written(a) -> bool:
    """Whether one of a's index arrays was written in place since a was made (the quick
    test; check_indices says which)."""
    for x, v in zip(a._pos + a._crd, a._iv):
        if v is not None and x._version != v:
            return True
    return False


def check_indices(a) -> None:
    """Raise where one of a's index arrays was written in place since a was made (its
    arrays were valid then: from_components checks them, every other route builds them
    so); a kernel or a conversion reading it could read out of bounds.
    ``A.indices(level)``, ``A.crow_indices()``, ``A.col_indices()`` and the arrays handed
    to ``from_components`` are the tensor's own, not copies (arrays made in inference
    mode, which torch counts no versions of, and writes through a NumPy view of an array
    are not seen)."""
    if not written(a):
        return
    k = next(k for k, (x, v) in enumerate(zip(a._pos + a._crd, a._iv))
             if v is not None and x._version != v)
    what, level = ("pos", k) if k < len(a._pos) else ("crd", k - len(a._pos))
    raise ValueError(
        f"scorch: this SparseTensor's index array ({what} of level {level}) was written in "
        f"place after it was made; a SparseTensor's index arrays never change "
        f"(A.indices(level), A.crow_indices(), A.col_indices() and the arrays given to "
        f"from_components are its own, not copies): build a new one with "
        f"scorch.from_components, which checks them")


def index_record(a) -> tuple:
    """((index array, its version when a was made), ...): what the extension's hot route
    compares again before it runs a kernel on a's arrays (_compiler._sparse_operand)."""
    return tuple((x, v) for x, v in zip(a._pos + a._crd, a._iv) if v is not None)


class SparseTensor(torch.Tensor):
    """A sparse tensor in any per-level format.  Build one with ``scorch.to_sparse``,
    ``scorch.from_edge_index`` or ``scorch.from_components``."""

    _format: Format
    _pos: list
    _crd: list
    _vals: torch.Tensor

    @staticmethod
    def __new__(cls, shape, fmt: Format, pos, crd, values, requires_grad=False,
                index_dtype=None, *, checked=False, versions=None):
        if not checked:   # (a user's call: the arrays are checked as from_components checks
            from ._convert import from_components   # them; scorch's own calls pass
            t = from_components(shape, fmt, pos=pos, crd=crd, values=values)   # checked)
            if index_dtype is not None and index_dtype != t.index_dtype:
                # (the same pattern, entry for entry, in the width asked: checked to fit)
                it = _resolve_index_dtype(index_dtype, t.shape, t.nnz)
                t = SparseTensor(t.shape, t._format,
                                 [None if p is None else p.to(it) for p in t._pos],
                                 [None if c is None else c.to(it) for c in t._crd],
                                 t._vals, index_dtype=it, checked=True)
            return t.requires_grad_() if requires_grad and not t.requires_grad else t
        try:
            self = torch.Tensor._make_wrapper_subclass(
                cls, tuple(shape), dtype=values.dtype, device=values.device,
                requires_grad=requires_grad)
        except RuntimeError as e:
            if "overflow" not in str(e):
                raise
            raise ValueError(f"a sparse tensor of shape {tuple(shape)} has more than 2^63 - 1 "
                             "elements, which a torch tensor cannot describe") from None
        self._format = fmt
        self._pos = list(pos)
        self._crd = list(crd)
        # (the index arrays' versions now, when they are valid; or those of the tensor
        # whose very arrays these are: a write to them since is refused, check_indices)
        self._iv = index_versions(self._pos + self._crd) if versions is None else versions
        self._vals = values
        # Kept for formats with no index arrays (dense), so the dtype asked for survives.
        self._index_dtype = index_dtype
        # Plain-Python copies for the hot path: reading .shape or .dtype on a subclass
        # goes through __torch_function__ (about 2 us each).
        self._shape = tuple(shape)
        self._desc = None  # (prepared operand, signature) once computed (_compiler)
        self._transposed = None  # {Format: (values version, copy, arrays)}: _compiler._transposed
        self._kernels = None  # {einsum text or kernel key: (operand count, entry)}: _compiler
        self._has_dups = None  # whether two entries share coordinates: _torch_ops
        if requires_grad:
            route_wrapper_grad(self)
        return self

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """Routes the high-level torch API (scorch/_torch_ops.py) before torch decomposes
        it; metadata queries and everything else go on to __torch_dispatch__."""
        fn = _HANDLERS.get(func, func)
        if fn is not func:
            if _compiling():   # (torch.compile tracing: one of scorch's ops runs outside)
                return outside(_torch_function)(func, types, args, kwargs)
            for x in (args + tuple(kwargs.values())) if kwargs else args:
                if type(x) is SparseTensor:   # (no op reads index arrays written since)
                    check_indices(x)
                elif type(x) in (list, tuple):
                    for y in x:
                        if type(y) is SparseTensor:
                            check_indices(y)
        try:
            with _NO_SUBCLASS_TF():
                # Handlers see SparseTensors as plain tensors for metadata (no re-entry).
                if kwargs:
                    if fn is not func:
                        kwargs = _handler_names(func, fn, kwargs)
                    return fn(*args, **kwargs)
                return fn(*args)
        except _ops().AtenRefusal as e:   # (named for the function the user called)
            raise e.renamed(func) from None

    def __matmul__(self, other):
        """``A @ X`` straight to the router, skipping torch's dispatch into
        __torch_function__ (~0.8 us), where that protocol would make exactly this call:
        torch functions enabled, no mode active, only SparseTensors and plain tensors."""
        if (type(other) in _PLAIN and type(self) is SparseTensor and _tf_enabled()
                and not _tf_mode() and not _compiling()):
            if type(other) is torch.Tensor:
                r = _SPARSE_DENSE_MATMUL(self, other)
                if r is not None:
                    return r
            with _NO_SUBCLASS_TF():
                return _HANDLERS.get(_MATMUL, _MATMUL)(self, other)
        return _MATMUL(self, other)

    # Augmented assignments as their methods (torch.compile traces these; torch's own
    # dunders sent it into a recursion): in place where the result keeps the entries.
    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def __ifloordiv__(self, other):
        return self.floor_divide_(other)

    def __imod__(self, other):
        return self.remainder_(other)

    def __ipow__(self, other):
        return self.pow_(other)

    def __iand__(self, other):
        return self.bitwise_and_(other)

    def __ior__(self, other):
        return self.bitwise_or_(other)

    def __ixor__(self, other):
        return self.bitwise_xor_(other)

    def __ilshift__(self, other):
        return self.bitwise_left_shift_(other)

    def __irshift__(self, other):
        return self.bitwise_right_shift_(other)

    def __rmatmul__(self, other):
        """``X @ A``: defining __matmul__ makes Python ask A first; the same short cut, or
        NotImplemented so that Python goes on to ``torch.Tensor.__matmul__(X, A)`` (the
        protocol, as without the short cut)."""
        if (type(other) is torch.Tensor and type(self) is SparseTensor and _tf_enabled()
                and not _tf_mode() and not _compiling()):
            with _NO_SUBCLASS_TF():
                return _HANDLERS[_RMATMUL](self, other)
        return NotImplemented

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default):
            return args[0]._rewrap(args[0]._vals)
        if func is torch.ops.aten.clone.default:
            return args[0].clone()
        if func._schema.is_mutable:   # (A.add_(1), A.lerp_(B, w), ...)
            _ops().refuse_aten(func, *args, *kwargs.values(), why="it writes in place, which "
                          "scorch does only where the result keeps the tensor's stored entries "
                          "(a scalar factor, a zero-preserving map)", hint="use the op out of "
                          "place (x = x.relu()) or .to_dense(); a torch.optim optimizer steps "
                          "a Parameter(SparseTensor)'s values itself")
        _ops().refuse_aten(func, *args, *kwargs.values())   # (formats named inside lists
                                                            # of operands too)

    # ---- properties --------------------------------------------------------------------
    @property
    def format(self) -> Format:
        return self._format

    @property
    def nnz(self) -> int:
        """Number of stored values (including explicit zeros and dense-level padding)."""
        return self._vals.shape[0]

    @property
    def index_dtype(self) -> torch.dtype:
        for a in self._pos + self._crd:
            if a is not None:
                return a.dtype
        return self._index_dtype or torch.int32

    @property
    def is_leaf(self) -> bool:
        """Whether the values are an autograd leaf (they carry the tensor's history)."""
        return self._vals.is_leaf

    @property
    def grad_fn(self):
        """The node that made the values (None for a leaf)."""
        return self._vals.grad_fn

    @property
    @outside_graph
    def grad(self):
        """The gradient of the stored values, as a SparseTensor with this pattern (None
        before a backward pass)."""
        g = self._vals.grad
        return None if g is None else self._rewrap(g)

    @grad.setter
    def grad(self, value):
        """A SparseTensor with this pattern, its values as a 1-D tensor, or None."""
        if isinstance(value, SparseTensor):
            if not _ops()._same_arrays(value, self):
                raise ValueError(
                    f"A.grad must have A's pattern (shape {tuple(self.shape)}, format "
                    f"{self._format}, the same {self.nnz} stored coordinates); got shape "
                    f"{tuple(value.shape)}, format {value._format}, nnz {value.nnz}: "
                    f"A.with_values(v) places values on A's pattern")
            value = value._vals
        self._vals.grad = value

    def values(self) -> torch.Tensor:
        """The 1-D tensor of stored values, in storage order (the tensor itself, no copy)."""
        return self._vals

    @outside_graph
    def indices(self, level=None):
        """``(pos, crd)`` of a level: each a 1-D tensor or None where the level has none.
        Without a level, as torch's COO ``indices()``: the (ndim, nnz) int64 coordinates
        of the stored entries, column e for ``values()[e]`` (a new tensor)."""
        n = self.dim()
        if level is None:
            check_indices(self)
            cols = _ops().dim_coords(self)
            return torch.stack(cols) if cols else torch.zeros(0, self.nnz, dtype=torch.int64)
        if not -n <= level < n:
            raise IndexError(f"level {level} is out of range for a {n}-level tensor")
        return self._pos[level], self._crd[level]

    def _values(self) -> torch.Tensor:
        """torch's private COO accessor, which graph code calls (``adj._values()``):
        the stored values, as ``values()``."""
        return self._vals

    def _indices(self) -> torch.Tensor:
        """torch's private COO accessor: the coordinates, as ``indices()``."""
        return self.indices()

    def _rewrap(self, values, requires_grad=False):
        t = SparseTensor(self.shape, self._format, self._pos, self._crd, values,
                         requires_grad=requires_grad, index_dtype=self.index_dtype,
                         checked=True, versions=self._iv)   # (the same index arrays)
        t._has_dups = self._has_dups
        return t

    @outside_graph
    def with_values(self, values: torch.Tensor) -> "SparseTensor":
        """The same pattern around new values (a 1-D tensor of length nnz)."""
        if not isinstance(values, torch.Tensor):
            raise TypeError(f"values must be a torch.Tensor, not {type(values).__name__}")
        if values.shape != self._vals.shape:
            raise ValueError(f"values must have shape {tuple(self._vals.shape)}, "
                             f"got {tuple(values.shape)}")
        if values.dtype not in VALUE_DTYPES:
            raise TypeError(f"values must be {VALUE_DTYPE_NAMES}, not {values.dtype}")
        if values.device.type != "cpu":
            raise ValueError(f"scorch tensors live on the CPU; got values on {values.device}")
        return self._rewrap(values, requires_grad=values.requires_grad)

    # ---- conversions -------------------------------------------------------------------
    def _arrays(self):
        """The level arrays and values as the C core reads them (``c_values``), its index
        arrays unwritten since they were checked (``check_indices``)."""
        check_indices(self)
        return ([_np(p) for p in self._pos], [_np(c) for c in self._crd],
                c_values(self._vals))

    @outside_graph
    def to_dense(self, dtype=None, *, masked_grad=None) -> torch.Tensor:
        """A dense torch.Tensor with the same values (duplicates summed); differentiable
        w.r.t. the values (the gradient is masked to the stored entries, as torch's
        ``masked_grad=True``: a SparseTensor holds no other)."""
        if masked_grad is False:
            raise NotImplementedError("to_dense(masked_grad=False): a SparseTensor's "
                                      "gradient lives on its stored entries only")
        if self._vals.requires_grad and torch.is_grad_enabled():
            out = _ops().to_dense(self)
            return out if dtype is None else out.to(dtype)
        out = torch.empty(tuple(self.shape), dtype=compute_dtype(self.dtype))
        pos, crd, vals = self._arrays()
        _C.to_dense(tuple(self.shape), self._format.as_tuple(), pos, crd, vals,
                    _INDEX_NAMES[self.index_dtype], out.numpy())
        return out.to(self.dtype if dtype is None else dtype)

    @outside_graph
    def to_format(self, format, index_dtype=None, *, drop_zeros=None) -> "SparseTensor":
        """This tensor in another format (a new tensor; this one is unchanged).

        Explicit zeros are kept, except that zeros a dense level stores (padding) are
        dropped when the source's innermost level is dense (only then are there padding
        values); ``drop_zeros=True/False`` overrides.  Differentiable w.r.t. the values.
        """
        fmt = Format.parse(format, self.dim())
        it = _resolve_index_dtype(index_dtype, self.shape, self.nnz)
        if index_dtype is None and self.index_dtype == torch.int64:
            it = torch.int64  # keep the source's width unless asked otherwise
        if drop_zeros is None:
            drop_zeros = self._format.levels[-1] == "dense"
        pos, crd, vals = self._arrays()
        p, c, v = _C.convert(tuple(self.shape), self._format.as_tuple(), pos, crd, vals,
                             _INDEX_NAMES[self.index_dtype], fmt.as_tuple(),
                             _INDEX_NAMES[it], bool(drop_zeros), _threads())
        out = _wrap(self.shape, fmt, p, c, v, it, self.dtype)
        if self._vals.requires_grad and torch.is_grad_enabled():
            out = _ops().summed_onto(out, _ops().dim_coords(self), self._vals)
        return out

    @outside_graph
    def to_torch(self, layout=None) -> torch.Tensor:
        """A torch sparse tensor: CSR for csr, CSC for csc, COO (coalesced) otherwise, or
        the ``layout`` asked for (torch.sparse_coo / sparse_csr / sparse_csc); its values
        are a copy, differentiable w.r.t. this tensor's values (torch's constructors
        record)."""
        check_indices(self)
        name = self._format.name
        if layout is None:
            layout = {"csr": torch.sparse_csr, "csc": torch.sparse_csc}.get(
                name, torch.sparse_coo)
        if layout in (torch.sparse_csr, torch.sparse_csc):
            want = "csr" if layout is torch.sparse_csr else "csc"
            t = self if name == want else self.to_format(want)
            ctor = torch.sparse_csr_tensor if want == "csr" else torch.sparse_csc_tensor
            with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
                warnings.simplefilter("ignore", UserWarning)
                return ctor(t._pos[1].clone(), t._crd[1].clone(), _copy_of(t._vals),
                            size=tuple(self.shape), check_invariants=False)
        if layout is not torch.sparse_coo:
            raise ValueError(f"to_torch supports sparse_coo, sparse_csr and sparse_csc, "
                             f"not {layout}")
        t = self.to_format("coo", torch.int64)
        idx = torch.stack(t._crd) if self.dim() else torch.zeros(0, 0, dtype=torch.int64)
        return torch.sparse_coo_tensor(idx, _copy_of(t._vals), tuple(self.shape),
                                       is_coalesced=True, check_invariants=False)

    @outside_graph
    def to_scipy(self):
        """A scipy.sparse array (csr_array / csc_array, else coo_array); arrays are copied."""
        check_indices(self)
        import scipy.sparse as sp

        if self.dtype in HALF_DTYPES:
            raise TypeError(f"to_scipy: scipy.sparse has no {self.dtype} values; convert "
                            "with .float() first")
        name = self._format.name
        shape = tuple(self.shape)
        vals = self._vals.detach().numpy().copy()
        if name in ("csr", "csc"):
            ctor = sp.csr_array if name == "csr" else sp.csc_array
            return ctor((vals, self._crd[1].numpy().copy(), self._pos[1].numpy().copy()),
                        shape=shape)
        t = self.to_format("coo")
        coords = tuple(c.numpy().astype(np.int64) for c in t._crd)
        return sp.coo_array((t._vals.detach().numpy().copy(), coords), shape=shape)

    @outside_graph
    def clone(self, *, memory_format=None) -> "SparseTensor":
        check_indices(self)   # (a copy of written arrays would be trusted as made valid)
        return SparseTensor(
            self.shape, self._format,
            [None if p is None else p.clone() for p in self._pos],
            [None if c is None else c.clone() for c in self._crd],
            self._vals.clone(), requires_grad=self.requires_grad,
            index_dtype=self.index_dtype, checked=True)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        check_indices(self)
        new = SparseTensor(self.shape, self._format, copy.deepcopy(self._pos, memo),
                           copy.deepcopy(self._crd, memo),
                           _copied_values(copy.deepcopy(self._vals.detach(), memo),
                                          self.requires_grad),
                           requires_grad=self.requires_grad, index_dtype=self.index_dtype,
                           checked=True)
        memo[id(self)] = new
        if self._vals.grad is not None:   # (a copied tensor keeps its gradient, as torch's)
            new._vals.grad = copy.deepcopy(self._vals.grad, memo)
        new.__dict__.update(copy.deepcopy(self._user_state(), memo))
        return new

    def _user_state(self) -> dict:
        """The attributes set on this tensor from outside (``nn.Parameter``'s
        ``_is_param``, a user's ``p.no_decay = True``), which copies and pickles carry as
        torch's carry a tensor subclass's ``__dict__``."""
        return {k: v for k, v in vars(self).items() if k not in _OWN_ATTRIBUTES}

    def __reduce_ex__(self, protocol):
        return (_rebuild, (tuple(self.shape), self._format.as_tuple(), self._pos, self._crd,
                           self._vals.detach(), self.requires_grad,
                           _INDEX_NAMES[self.index_dtype], self._user_state()))

    def _share_arrays(self):
        """Move the index and value arrays into shared memory in place (as torch's
        share_memory_ moves a storage), then retire every prepared operand: the addresses
        scorch kept of these arrays, in this tensor and in every one sharing them (views,
        with_values), point at the freed old blocks."""
        moved = False
        for a in self._pos + self._crd + [self._vals]:
            if a is not None and not a.is_shared():
                a.share_memory_()
                moved = True
        if moved:
            from ._compiler import retire_prepared
            retire_prepared()

    def _reduce_for_processes(self):
        """The reduction multiprocessing's pickler uses (queues, spawn, DataLoader
        workers): arrays already in shared memory (``share_memory_()`` first) are sent as
        they are, the others as shared-memory copies.  torch's reducer would move them
        into shared memory in place, freeing the blocks a kernel running in another
        thread of the sender may be reading (a queue pickles on its feeder thread, while
        the program goes on computing with the tensor).
        A child being started (spawn, forkserver) is sent the arrays moved into shared
        memory in place, as torch's reducer moves a dense tensor's storage then: the
        launch passes their file descriptors after pickling (multiprocessing notes them
        without a duplicate), so a copy would have to outlive the call, one per child.
        Pickling for a launch runs in the thread that starts the child."""
        from multiprocessing.context import get_spawning_popen
        if get_spawning_popen() is not None:
            self._share_arrays()

        def shared(a):
            return a if a is None or a.is_shared() else a.clone().share_memory_()

        return (_rebuild, (tuple(self.shape), self._format.as_tuple(),
                           [shared(p) for p in self._pos], [shared(c) for c in self._crd],
                           shared(self._vals.detach()), self.requires_grad,
                           _INDEX_NAMES[self.index_dtype], self._user_state()))

    def __repr__(self, *, tensor_contents=None):
        vals = self._vals.detach()
        vs = repr(vals).replace("\n", "\n       ")
        return (f"SparseTensor(shape={tuple(self.shape)}, format={self._format}, "
                f"nnz={self.nnz}, dtype={self.dtype}, index_dtype={self.index_dtype},\n"
                f"       values={vs})")

    __str__ = __repr__


# scorch's own attributes of a SparseTensor (SparseTensor.__new__'s, and the mark
# SparseLinear.weight's tensors carry): the rest are its user's.
_OWN_ATTRIBUTES = frozenset(("_format", "_pos", "_crd", "_vals", "_index_dtype", "_shape",
                             "_desc", "_transposed", "_kernels", "_has_dups", "_iv",
                             "_pattern_owner"))
_HANDLERS: dict = {}   # filled by scorch._torch_ops on import (the package imports it)
_SPARSE_DENSE_MATMUL = None   # SparseTensor @ plain tensor without autograd: _torch_ops
_NO_SUBCLASS_TF = torch._C.DisableTorchFunctionSubclass
_MATMUL, _RMATMUL = torch.Tensor.__matmul__, torch.Tensor.__rmatmul__
_PLAIN = (torch.Tensor, SparseTensor)
_tf_enabled = torch._C._is_torch_function_enabled
_tf_mode = torch._C._is_torch_function_mode_enabled


def _handler_names(func, fn, kwargs):
    """kwargs of a call of torch's ``func`` under the names its handler ``fn`` gives the
    same parameters: torch passes a caller's keywords as written (``input=``, ``mat2=``,
    ``train=``), where handlers name the parameters their own way (``a``, ``b``)."""
    names = _RENAMED.get(func)
    if names is None:
        names = _RENAMED[func] = _renaming(func, fn)
    return {names.get(k, k): v for k, v in kwargs.items()} if names else kwargs


_RENAMED: dict = {}   # torch function -> {torch's parameter name: the handler's}


def _renaming(func, fn) -> dict:
    """torch's parameter names of ``func`` (from torch's own table of its signatures) that
    the handler ``fn`` takes at the same position under another name."""
    import inspect

    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ours = torch.overrides.get_testing_overrides().get(func)
    try:
        mine = list(inspect.signature(fn).parameters.values())
        if ours is not None:
            theirs = list(inspect.signature(ours).parameters.values())
        else:   # (torch.sparse's builtins: the signature their documentation opens with)
            theirs = [inspect.Parameter(n, positional[1]) for n in _documented(func)]
    except (TypeError, ValueError):
        return {}
    taken = {p.name for p in mine}
    # (torch's NumPy spellings, where the handler has torch's own names: sum(axis=0))
    names = {a: b for a, b in (("axis", "dim"), ("keepdims", "keepdim"))
             if b in taken and a not in taken}
    for t, m in zip(theirs, mine):
        if t.kind not in positional or m.kind not in positional:
            break
        if t.name != m.name and t.name not in taken:
            names[t.name] = m.name
    return names


def _documented(func) -> list:
    """The positional parameter names a torch builtin's documentation gives it
    ("sparse.sampled_addmm(input, mat1, mat2, *, beta=1., ...) -> Tensor"), or []."""
    if func is torch.sparse.mm:   # (texts that name them otherwise than the call takes)
        return ["sparse", "dense"]
    if func is torch.sparse.addmm:
        return ["input", "mat1", "mat2"]
    m = re.search(r"^\s*[\w.]+\(([^)]*)\)\s*->", func.__doc__ or "", re.M)
    if m is None:
        return []
    names = []
    for part in m.group(1).split(","):
        part = part.strip().split("=")[0].strip()
        if part == "*" or not part.isidentifier():
            break
        names.append(part)
    return names


def _torch_function(func, types, args, kwargs):
    """SparseTensor.__torch_function__ as a function: what torch.compile runs outside
    its graph (``outside``) where it traces an op on a SparseTensor."""
    return SparseTensor.__torch_function__(func, types, args, kwargs)


def _ops():
    from . import _torch_ops

    return _torch_ops


def route_wrapper_grad(t: SparseTensor) -> None:
    """Where the wrapper ``t`` itself requires grad, a gradient autograd accumulates into
    it goes on to its values.  Autograd reaches the wrapper (not the values, where scorch
    records) only as an ``autograd.Function``'s input: ``checkpoint(use_reentrant=True)``
    and custom Functions, whose gradient for a SparseTensor argument was left on the
    wrapper's own grad slot, which nothing reads (3-4 us a tensor that requires grad)."""
    if _WRAPPER_HOOKS.__get__(t) is None:   # (as register_post_accumulate_grad_hook does,
        hooks = collections.OrderedDict()   # which sees the values' grad_fn: SparseTensor's)
        _WRAPPER_HOOKS.__set__(t, hooks)
        hooks[0] = _grad_to_values


_WRAPPER_HOOKS = torch._C.TensorBase._post_accumulate_grad_hooks
_WRAPPER_GRAD = torch._C.TensorBase.grad


def _grad_to_values(t: SparseTensor) -> None:
    with _NO_SUBCLASS_TF():
        g = _WRAPPER_GRAD.__get__(t)
        _WRAPPER_GRAD.__set__(t, None)
    if g is None:
        return
    g = _ops().align_values(g, t)   # (a SparseTensor, or dense from a Function's backward)
    # (the values' graph may serve other paths of this backward, and later ones: kept;
    # recorded where the outer backward records, as create_graph=True does)
    torch.autograd.backward(t._vals, g.to(t._vals.dtype), retain_graph=True,
                            create_graph=torch.is_grad_enabled())


def _copy_of(values):
    """A copy of values, recorded by autograd where they require grad (detached else)."""
    return values.clone() if values.requires_grad and torch.is_grad_enabled() else \
        values.detach().clone()


def _copied_values(values, requires_grad):
    """A copy's values: a leaf that requires grad where the original's did (as a copied
    tensor is), for deepcopy and unpickling alike."""
    return values.detach().requires_grad_() if requires_grad and not values.requires_grad \
        else values


def _rebuild(shape, fmt_tuple, pos, crd, values, requires_grad, index_name="int32",
             state=None):
    """Unpickling entry point (registered as a safe global for torch.load).  The arrays
    are checked as from_components checks them: a file is input like any other
    (torch.load(weights_only=True) is torch's mode for untrusted ones)."""
    from ._convert import from_components
    from ._format import _format_from_tuple

    t = from_components(shape, _format_from_tuple(*fmt_tuple), pos=pos, crd=crd,
                        values=_copied_values(values, requires_grad))
    if not any(a is not None for a in t._pos + t._crd):
        t._index_dtype = _INDEX_OF_NAME[index_name]   # (dense formats: no arrays to say it)
    if requires_grad:
        torch.Tensor.requires_grad_(t, True)   # (the wrapper's flag; the values' is set)
        route_wrapper_grad(t)
    if state:
        t.__dict__.update({k: v for k, v in state.items() if k not in _OWN_ATTRIBUTES})
    return t


def _wrap(shape, fmt, pos, crd, vals, index_dtype, dtype=None) -> SparseTensor:
    """A SparseTensor around arrays the C core returned (torch tensors or NumPy arrays
    owning their memory, or an operand's index tensors where the result shares its
    pattern); ``dtype`` narrows the values to a WIDENED dtype they were computed for."""
    if type(vals) is torch.Tensor and (dtype is None or dtype is vals.dtype):
        # the DLPack route: every array is a tensor already (csrc/py owning_tensor_dl)
        return SparseTensor(shape, fmt, pos, crd, vals, index_dtype=index_dtype, checked=True)
    v = _torch(vals)
    if dtype is not None and dtype is not v.dtype:
        v = v.to(dtype)
    return SparseTensor(shape, fmt, [_torch(p) for p in pos], [_torch(c) for c in crd], v,
                        index_dtype=index_dtype, checked=True)


_I32_MAX = 2**31 - 1


def _resolve_index_dtype(index_dtype, shape, nnz_bound) -> torch.dtype:
    """int32 when every dimension and the entry count fit, else int64; an explicit
    int32 that cannot fit is refused by the core with a message naming the size."""
    if index_dtype is None:
        fits = max(shape, default=0) <= _I32_MAX and nnz_bound <= _I32_MAX
        return torch.int32 if fits else torch.int64
    if index_dtype not in _INDEX_NAMES:
        raise TypeError(f"index_dtype must be torch.int32 or torch.int64, not {index_dtype}")
    return index_dtype
