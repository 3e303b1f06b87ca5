"""``scorch.compile(fn)``: dense products inside ``fn`` wait until it is known what they
are used for, so that a product a sparse tensor samples is never formed densely.

Eager PyTorch computes ``mask * (Q @ K.T)`` as written: the whole n × n product first,
then the mask.  Inside a compiled function a product of dense tensors (``mm``,
``matmul``, ``bmm``, ``einsum``, ``mv``, ``dot``) returns a *deferred product*: a tensor
with the right shape and dtype that holds an einsum equation and its operands instead of
values.  Multiplying it elementwise by a tensor (a SparseTensor or a dense tensor of its
shape, a dense one of its trailing shape) or by a scalar, dividing it by a scalar,
negating, transposing or summing it over dimensions extend the equation; anything else
computes it and runs as written.  A product that a SparseTensor multiplied is computed by
one ``scorch.einsum`` — ``mask * (Q @ K.T)`` is the SDDMM ``einsum("ik,ij,kj->ik", mask,
Q, K)`` over the mask's entries — and one without is computed by the ops as written (the
same kernels, the same bits as eager).  Products of sparse operands, and products whose
operands are deferred products, are not deferred: they run as written.  What ``fn``
returns is computed before the call returns; autograd records through the einsum calls
as for any other scorch op.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import numbers
import sys
import types
import weakref

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ._tensor import SparseTensor, outside_graph

_MAX_TERMS = 12   # a product with more operands is computed, not extended (the compiler
                  # takes 16; each factor multiplied in adds one)
_MAX_SPARSE = 4   # nor one with more sparse operands: its gradient reads one more, and the
                  # compiler co-iterates at most 6
_T = torch.Tensor

# What a deferred product answers from its own metadata, without computing it.
_METADATA = {
    _T.shape.__get__, _T.dtype.__get__, _T.device.__get__, _T.ndim.__get__,
    _T.layout.__get__, _T.is_sparse.__get__, _T.is_cuda.__get__, _T.size, _T.dim,
    _T.ndimension, _T.numel, _T.nelement, _T.is_floating_point, _T.is_complex, _T.__len__,
}
_REQUIRES_GRAD = _T.requires_grad.__get__


class _Product(torch.Tensor):
    """A deferred einsum: ``out`` the output's index letters, ``terms`` the operands and
    their letters (plain tensors and SparseTensors).  The wrapper itself does not require
    grad (``_requires_grad`` says whether its value will): what reads it without torch's
    functions (``autograd.Function.apply``) sees a constant, never a leaf that gradients
    stop at."""

    @staticmethod
    def __new__(cls, out, terms, shape, dtype, base=None, versions=None):
        self = torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=dtype,
                                                   device=torch.device("cpu"))
        self._out = out
        self._shape, self._dtype = tuple(shape), dtype   # (plain reads: no torch function)
        self._terms = tuple(terms)
        self._value = None
        self._eager = None   # how to compute it as written (the op and its operands)
        self._view_of = base    # the product this one is a view of (a transpose), if any
        self._perm = None       # a view's dimensions as its base's (_permuted)
        self._reads = ()        # the products its ops as written read (set by the mode)
        self._grad_mode = torch.is_grad_enabled()   # (computed later under the same)
        self._requires_grad = self._grad_mode and any(t.requires_grad for t, _ in terms)
        # (the operands' versions when the product was first taken: a product extended
        # from another keeps the other's, so a change in between is still seen)
        self._versions = versions if versions is not None else _versions_of(self._terms)
        return self

    def equation(self) -> str:
        return ",".join(ix for _, ix in self._terms) + "->" + self._out

    def compute(self) -> torch.Tensor:
        """The product's value (computed once)."""
        if self._value is None:
            ops = [t for t, _ in self._terms]
            if _versions_of(self._terms) != self._versions:
                raise RuntimeError(
                    f"scorch.compile: an operand of the deferred product {self.equation()} "
                    "was changed in place, outside torch's functions, after the product "
                    "was taken and before it was used; compute the product first")
            # (as when it was taken: grad mode; no inference mode or autocast, which
            # products are not deferred under)
            with torch.inference_mode(False), torch.autocast("cpu", enabled=False), \
                    torch.set_grad_enabled(self._grad_mode):   # (the last: the first sets it)
                self._value = self._computed_now(ops)
            self._eager = None
        return self._value

    def _computed_now(self, ops):
        # Sampled by a SparseTensor: one fused kernel.  Otherwise (and for a view, whose
        # value must share its base's memory) the ops as written: the same kernels, the
        # same roundings, formats and errors as eager PyTorch.
        if self._view_of is not None or not any(isinstance(t, SparseTensor) for t in ops):
            return self._eager()
        from ._torch_ops import einsum
        try:
            return einsum(self.equation(), *ops)
        except NotImplementedError:
            return self._eager()   # (what the compiler does not fuse runs as written)

    def __getattr__(self, name):
        # SparseTensor's own attributes (nnz, format, with_values) on a product whose
        # value is one; torch.Tensor's resolve before this is reached
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.compute(), name)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Outside a compiled function (a deferred product kept after it returned): plain.
        return _plain(func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args, kwargs = _computed((args, kwargs or {}))
        return func(*args, **kwargs)


def _plain(func, args, kwargs):
    """func as on plain tensors: metadata from a deferred product's own (from its value
    once computed: an in-place op may have changed it), anything else computes it."""
    if func in _METADATA or func == _REQUIRES_GRAD:
        p = args[0] if args else None
        if type(p) is _Product and p._value is None:
            if func == _REQUIRES_GRAD:   # (a new method-wrapper each time)
                return p._requires_grad
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
    return _as_written(func, args, kwargs)


def _computed(tree):
    """tree (a tensor, number or tuple / list / dict of them) with its deferred products
    computed; the same object where it holds none."""
    return _mapped(tree, _Product.compute)


def _mapped(x, fn):
    """x with fn applied to the deferred products in it: through tuples (namedtuples,
    torch.return_types, other subclasses), lists, dicts, dataclass instances and
    SimpleNamespaces, each copied where something in it changed."""
    if type(x) is _Product:
        return fn(x)
    if isinstance(x, (tuple, list)):
        ys = [_mapped(y, fn) for y in x]
        if all(y is z for y, z in zip(ys, x)):
            return x
        if type(x) in (tuple, list):
            return type(x)(ys)
        if hasattr(type(x), "_fields"):   # (a namedtuple)
            return type(x)(*ys)
        if isinstance(x, tuple):          # (a structseq or another subclass: from a
            try:                          # sequence, or a plain tuple where it takes none)
                return type(x)(ys)
            except TypeError:
                return tuple(ys)
        y = copy.copy(x)
        y[:] = ys
        return y
    if isinstance(x, dict):
        ys = {k: _mapped(v, fn) for k, v in x.items()}
        if all(ys[k] is v for k, v in x.items()):
            return x
        y = copy.copy(x)   # (a dict subclass keeps its type: defaultdict, OrderedDict)
        y.update(ys)
        return y
    if isinstance(x, types.SimpleNamespace) or (dataclasses.is_dataclass(x) and
                                                not isinstance(x, type)):
        names = [f.name for f in dataclasses.fields(x)] if dataclasses.is_dataclass(x) \
            else list(vars(x))
        had = {n: getattr(x, n) for n in names if hasattr(x, n)}   # (a field not set yet)
        ys = {n: _mapped(v, fn) for n, v in had.items()}
        if all(ys[n] is had[n] for n in ys):
            return x
        y = copy.copy(x)
        for n, v in ys.items():
            object.__setattr__(y, n, v)   # (a frozen dataclass too)
        return y
    return x


def _as_written(func, args, kwargs):
    """func on the operands with the deferred products computed.  A method called on a
    deferred product whose value is a SparseTensor is the SparseTensor's own method
    (``values()``, ``to_dense()``): torch's would not reach it."""
    self = args[0] if args else None
    args, kwargs = _computed((args, kwargs))
    if isinstance(self, _Product) and type(args[0]) is not torch.Tensor:
        name = getattr(func, "__name__", None)
        if name == "__get__":
            name = getattr(getattr(func, "__self__", None), "__name__", None)
        elif getattr(torch.Tensor, name or "", None) is not func:
            name = None   # (a torch.* function: its own argument order)
        own = inspect.getattr_static(type(args[0]), name, None) if name else None
        if own is not None and own is not inspect.getattr_static(torch.Tensor, name, None):
            got = getattr(args[0], name)
            return got if func.__name__ == "__get__" else got(*args[1:], **kwargs)
    return func(*args, **kwargs)


def _data(t):
    """The tensor whose version counter and storage hold t's values."""
    return t._vals if isinstance(t, SparseTensor) else t


def _versions_of(terms) -> tuple:
    return tuple(_data(t)._version for t, _ in terms)


def _storage(t):
    try:
        return _data(t).untyped_storage().data_ptr()
    except (RuntimeError, TypeError, NotImplementedError):
        return None


# Tensor methods that write into their first operand besides the trailing-underscore ones.
_IN_PLACE = {"__setitem__", "__set__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
             "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
             "__ilshift__", "__irshift__", "__imatmul__"}


# Functions that write into operands of theirs that are not the first, and when: the
# running statistics of a normalisation that updates them, the weight an embedding
# renormalises (max_norm).  ATen's batch_norm does not count these writes in the version
# counters, and the embedding's write runs inside the function, below this mode.
_WRITES_INTO = {
    F.batch_norm: (("running_mean", "running_var"), lambda b: b.get("training", False)),
    F.instance_norm: (("running_mean", "running_var"),
                      lambda b: b.get("use_input_stats", True)),
    F.embedding: (("weight",), lambda b: b.get("max_norm") is not None),
    F.embedding_bag: (("weight",), lambda b: b.get("max_norm") is not None),
}


@functools.lru_cache(maxsize=None)
def _signature(func):
    return inspect.signature(func)


def _written(func, args, kwargs):
    """The tensors func writes into: its first operand (or the tensors of a list there:
    ``_foreach_mul_``) for an in-place op or one called with ``inplace=True``
    (``F.relu``), ``out``; ``x.data = y`` writes x; the operands _WRITES_INTO names."""
    name = getattr(func, "__name__", "")
    out = kwargs.get("out")
    written = [out] if isinstance(out, torch.Tensor) else list(out or ())
    if args and (name in _IN_PLACE or kwargs.get("inplace") is True or
                 (name.endswith("_") and not name.endswith("__"))):
        written += args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
    others = _WRITES_INTO.get(func)
    if others is not None:
        try:
            bound = _signature(func).bind(*args, **kwargs).arguments
        except TypeError:   # (torch reports a wrong call)
            bound = {}
        if bound and others[1](bound):
            written += [bound.get(n) for n in others[0]]
    return [t for t in written if isinstance(t, torch.Tensor)]


def _reads_any(p: _Product, written, changed) -> bool:
    """Whether computing p reads what an op is about to write: an operand's storage, a
    product its ops as written read (``s = p * 2; p.mul_(3)``: s is p * 2 before the
    change), or such a product's computed value."""
    if any(_storage(t) in changed for t, _ in p._terms):
        return True
    for q in p._reads:
        if any(q is w for w in written) or _reads_any(q, written, changed) or (
                q._value is not None and _storage(q._value) in changed):
            return True
    return False


def _settled(p: _Product):
    return p if p._value is None else p._value


def _deferrable(*ts) -> bool:
    """Whether a product of these operands may wait: plain dense CPU tensors of one
    floating dtype, in plain modes (_plain_modes), none made in inference mode (torch
    counts no versions of those: a later write would go unseen)."""
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout is torch.strided
               and t.device.type == "cpu" and t.dtype == ts[0].dtype
               and not t.is_inference() for t in ts) and \
        ts[0].dtype.is_floating_point and _plain_modes()


def _plain_modes() -> bool:
    """No functorch transform, autocast or inference mode in force: their rules apply at
    the op, which a later computation would no longer see."""
    return not torch.is_inference_mode_enabled() and not torch.is_autocast_enabled("cpu") \
        and not torch._C._are_functorch_transforms_active()


def _term(x, ix):
    """(x, ix) as a term, a dense operand that is a permuted view of a contiguous tensor
    (``K.T``) given as that tensor with its letters permuted, so the kernel reads it in
    its own layout and no transposed copy is made."""
    if isinstance(x, SparseTensor) or x.dim() < 2 or x.is_contiguous():
        return x, ix
    order = sorted(range(x.dim()), key=lambda d: -x.stride(d))
    y = x.permute(order)
    return (y, "".join(ix[d] for d in order)) if y.is_contiguous() else (x, ix)


def _product(terms, out, dtype):
    """A _Product from (tensor, letters) terms, or None where the sizes disagree."""
    sizes = {}
    terms = [_term(t, ix) for t, ix in terms]
    for t, ix in terms:
        if t.dim() != len(ix):
            return None
        for c, s in zip(ix, t.shape):
            if sizes.setdefault(c, s) != s:
                return None
    return _Product(out, terms, [sizes[c] for c in out], dtype)


def _product_of(a, b, dims):
    """a times b as a matrix / vector product, where (a.dim(), b.dim()) is in ``dims``."""
    if type(a) is _Product or type(b) is _Product or not isinstance(a, torch.Tensor) or \
            not isinstance(b, torch.Tensor) or not _deferrable(a, b):
        return None   # (a product of deferred products computes them first: see above)
    shapes = (a.dim(), b.dim())
    if shapes not in dims:
        return None
    ia, ib, out = _MATMUL[shapes]
    return _product([(a, ia), (b, ib)], out, a.dtype)


# (a.dim(), b.dim()) -> the letters of a, of b and of the product
_MATMUL = {(2, 2): ("ij", "jk", "ik"), (2, 1): ("ij", "j", "i"), (1, 2): ("j", "jk", "k"),
           (1, 1): ("j", "j", ""), (3, 3): ("bij", "bjk", "bik")}
_matmul = lambda a, b: _product_of(a, b, _MATMUL)
_mm = lambda a, b: _product_of(a, b, {(2, 2)})
_bmm = lambda a, b: _product_of(a, b, {(3, 3)})
_mv = lambda a, b: _product_of(a, b, {(2, 1)})
_dot = lambda a, b: _product_of(a, b, {(1, 1)})


def _einsum(eq, *ops):
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = tuple(ops[0])
    if not isinstance(eq, str) or "->" not in eq or "." in eq or not ops:
        return None
    ins, out = eq.replace(" ", "").split("->")
    ins = ins.split(",")
    if len(ins) != len(ops) or any(type(x) is _Product or not isinstance(x, torch.Tensor)
                                   for x in ops) or not _deferrable(*ops):
        return None
    if not all(ix.isascii() and ix.isalpha() and len(set(ix)) == len(ix) for ix in ins):
        return None
    if len(set(out)) != len(out) or not set(out) <= set("".join(ins)):
        return None
    return _product(list(zip(ops, ins)), out, ops[0].dtype)


def _extendable(a) -> bool:
    """Whether a is a deferred product that an op may extend: not computed (nor, for a
    view, its base: an in-place change of the base shows in the view), and taken under
    the grad mode now in force (one taken under no_grad is a constant to what follows)."""
    while type(a) is _Product and a._value is None:
        if a._view_of is None:
            return a._grad_mode == torch.is_grad_enabled() and _plain_modes()
        a = a._view_of
    return False


def _sparse_reads(p: _Product) -> int:
    return sum(isinstance(t, SparseTensor) for t, _ in p._terms)


def _scalar_factor(s, dtype):
    """A Python number s as a 0-D tensor of dtype, or None where eager PyTorch would not
    compute with that value (float16 / bfloat16 products scale in float32; a number
    beyond the dtype's range or below its smallest normal would round)."""
    if dtype in (torch.float16, torch.bfloat16):
        return None
    if not 2.0 ** -16 <= abs(s) <= 2.0 ** 16:   # (folded into the sum of products, a large
        return None   # one overflows sooner than eager's, ints past int64 eager refuses, a
    return torch.tensor(s, dtype=dtype)   # tiny one loses bits; 0 turns eager's inf to 0)


def _mul(a, b):
    """Elementwise a * b where one side is a deferred product: its equation gains the other
    side (a tensor of its shape or of its trailing shape, or a scalar)."""
    left = not _extendable(a)   # (the factor is the left operand: eager's result takes a
    if left:                    # sparse left operand's format, and so does the einsum's)
        a, b = b, a
    if not _extendable(a) or isinstance(b, _Product):
        return None   # (fused, p1 * p2 under a mask costs nnz·d² against eager's n²·d)
    if _sparse_reads(a) + isinstance(b, SparseTensor) > _MAX_SPARSE:
        return None
    if isinstance(b, numbers.Real) and not isinstance(b, bool):
        b = _scalar_factor(b, a._dtype)
        if b is None:
            return None
    if not isinstance(b, torch.Tensor) or len(a._terms) >= _MAX_TERMS or \
            _data(b).is_inference():
        return None
    bs = b._shape if isinstance(b, SparseTensor) else tuple(b.shape)
    n = len(a._shape)
    if b.dtype != a._dtype or len(bs) > n or bs != a._shape[n - len(bs):]:
        return None
    if isinstance(b, SparseTensor):
        if len(bs) != n or not any(b._format.kinds):   # (a sparse factor broadcast is
            return None   # eager's to refuse; an all-dense one gains nothing from fusion)
    elif type(b) not in (torch.Tensor, torch.nn.Parameter) or b.layout is not torch.strided:
        return None
    ix = a._out[n - len(bs):]
    v = (_data(b)._version,)
    if left and isinstance(b, SparseTensor):
        return _Product(a._out, [(b, ix)] + list(a._terms), a._shape, a._dtype,
                        versions=v + a._versions)
    return _Product(a._out, list(a._terms) + [(b, ix)], a._shape, a._dtype,
                    versions=a._versions + v)


def _div(a, b):
    # (_mul checks a, and 1 / b's range: the range is its own reciprocal)
    if isinstance(b, numbers.Real) and not isinstance(b, bool) and b != 0:
        return _mul(a, 1.0 / b)
    return None


def _neg(a):
    return _mul(a, -1.0)


def _dims(a, dims):
    """dims (ints, negative from the end) as distinct positions of a's, or None where
    torch would raise (out of range, repeated): the op then runs, and raises, as written."""
    n = len(a._shape)
    if not all(isinstance(d, int) and -max(n, 1) <= d < max(n, 1) for d in dims):
        return None
    dims = [d % n if n else 0 for d in dims]
    return dims if len(set(dims)) == len(dims) else None


def _permuted(a, order):
    """A view of a with its dimensions in ``order``."""
    if not _extendable(a) or order is None or sorted(order) != list(range(len(a._shape))):
        return None
    root = a
    if a._view_of is not None:   # (a view of a view: of the root, its orders composed, so
        root = a._view_of        # that a chain of them computes in one step)
        order = [a._perm[d] for d in order]
    v = _Product("".join(root._out[d] for d in order), a._terms,
                 [root._shape[d] for d in order], a._dtype, base=root, versions=a._versions)
    v._perm = order
    v._eager = lambda: root.compute().permute(order)
    v._reads = (root,)
    return v


def _transpose(a, d0, d1):
    if not _extendable(a) or len(a._shape) == 0:
        return None
    da, db = _dims(a, [d0]), _dims(a, [d1])
    if da is None or db is None:
        return None
    order = list(range(len(a._shape)))
    order[da[0]], order[db[0]] = order[db[0]], order[da[0]]
    return _permuted(a, order)


def _t(a):
    return _permuted(a, list(range(len(a._shape)))[::-1]) if _extendable(a) and \
        len(a._shape) <= 2 else None


def _mT(a):
    return _transpose(a, -2, -1) if _extendable(a) and len(a._shape) >= 2 else None


def _permute(a, *dims):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    if not _extendable(a) or len(dims) != len(a._shape):
        return None
    return _permuted(a, _dims(a, list(dims)))


def _sum(a, dim=None, keepdim=False, *, dtype=None):
    if not _extendable(a) or keepdim or dtype is not None:
        return None
    if dim is None:
        dims = list(range(len(a._shape)))
    else:
        dims = _dims(a, [dim] if isinstance(dim, int) else list(dim))
        if not dims or not len(a._shape):   # (torch sums everything over dim=[])
            return None
    keep = [d for d in range(len(a._shape)) if d not in dims]
    out = "".join(a._out[d] for d in keep)
    return _Product(out, a._terms, [a._shape[d] for d in keep], a._dtype,
                    versions=a._versions)


_RULES = {
    torch.mm: _mm, _T.mm: _mm, torch.matmul: _matmul, _T.matmul: _matmul,
    _T.__matmul__: _matmul, torch.bmm: _bmm, _T.bmm: _bmm, torch.mv: _mv, _T.mv: _mv,
    torch.dot: _dot, _T.dot: _dot,
    torch.einsum: _einsum,
    torch.mul: _mul, _T.mul: _mul, _T.__mul__: _mul, _T.__rmul__: _mul,
    torch.div: _div, _T.div: _div, _T.__truediv__: _div,
    torch.neg: _neg, _T.neg: _neg, _T.__neg__: _neg,
    torch.t: _t, _T.t: _t, _T.T.__get__: _t, _T.mT.__get__: _mT,
    torch.transpose: _transpose, _T.transpose: _transpose,
    torch.permute: _permute, _T.permute: _permute,
    torch.sum: _sum, _T.sum: _sum,
}


class _Deferring(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self._pending = weakref.WeakSet()   # products taken and not computed yet

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rule = _RULES.get(func)
        if rule is not None:
            # (a product computed already is its value: an in-place op may have changed it)
            args = _mapped(args, _settled)
            try:
                p = rule(*args, **kwargs)
            except TypeError:   # (a signature the rule does not take: run as written)
                p = None
            if p is not None:
                if p._eager is None:   # (a view's is set: its root, permuted)
                    p._eager = functools.partial(_as_written, func, args, kwargs)
                    p._reads = tuple(x for x in args if type(x) is _Product)
                self._pending.add(p)
                return p
        written = _written(func, args, kwargs) if self._pending else ()
        if written:
            # (a product of what this op changes is computed before the change, as eager
            # PyTorch would have computed it)
            changed = {_storage(t) for t in written} - {None}
            for p in list(self._pending):
                if p._value is None and _reads_any(p, written, changed):
                    p.compute()
        for a in args:
            if type(a) is _Product:
                return _plain(func, args, kwargs)
        # (no deferred product among the operands, or only inside a list or keyword:
        # there torch calls _Product.__torch_function__, which computes it)
        return func(*args, **kwargs)


def _eager_inside():
    """A context in which a torch.compile'd function called inside ``fn`` runs eagerly:
    Dynamo would trace it with this mode on the stack and deferred products among its
    arguments, and cache frames that then compute another function (its ``+ 1`` lost).
    Where torch._dynamo is not loaded no function can have been compiled: nothing to do
    (and no 0.8 s import)."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def compile(fn=None):
    """``fn`` with its dense products deferred until their use is known (see the module's
    text): a product that a sparse tensor samples (``mask * (Q @ K.T)``) runs as one fused
    SDDMM kernel instead of being formed densely.  Use as ``scorch.compile(fn)`` or
    ``@scorch.compile``."""
    if fn is None:
        return compile

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with _eager_inside(), _Deferring():
            out = fn(*args, **kwargs)
        return _computed(out)

    return outside_graph(run)   # (under torch.compile: run eagerly, one graph break)
