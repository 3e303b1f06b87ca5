"""``scorch.compile(fn)``: products inside ``fn`` wait until it is known what they are used
for, so that a dense product sampled by a sparse tensor is never formed densely.

Eager PyTorch computes ``mask * (Q @ K.T)`` as written: the whole n × n product first,
then the mask.  Inside a compiled function ``Q @ K.T`` (``mm``, ``matmul``, ``bmm``,
``einsum``, ``mv``, ``dot``) returns a *deferred product*: a tensor with the right shape
and dtype that holds an einsum equation and its operands instead of values.  Multiplying
it elementwise by a tensor (sparse or dense) or a scalar, transposing it, or summing it
over dimensions extends the equation; anything else computes it (``scorch.einsum`` when
an operand is sparse, ``torch.einsum`` otherwise) and runs as written.  So
``mask * (Q @ K.T)`` becomes ``einsum("ij,ik,jk->ij", mask, Q, K)``: one SDDMM kernel
that computes the product at mask's entries only.  Products whose operands are deferred
products compute those first (a chain ``(A @ X) @ W`` is cheaper as two products than as
one loop nest over all four indices).  What ``fn`` returns is computed before the call
returns; autograd records through the einsum calls as for any other scorch op.
"""
from __future__ import annotations

import functools
import inspect
import numbers
import weakref

import torch
from torch.overrides import TorchFunctionMode

from ._tensor import SparseTensor, outside_graph

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MAX_TERMS = 12   # a product with more operands is computed, not extended (the compiler
                  # takes 16; x * x doubles them)
_MAX_SPARSE = 4   # nor one with more sparse operands: its gradient reads one more, and the
                  # compiler co-iterates at most 6
_T = torch.Tensor

# What a deferred product answers from its own metadata, without computing it.
_METADATA = {
    _T.shape.__get__, _T.dtype.__get__, _T.device.__get__, _T.requires_grad.__get__,
    _T.ndim.__get__, _T.layout.__get__, _T.is_sparse.__get__, _T.is_cuda.__get__,
    _T.size, _T.dim, _T.ndimension, _T.numel, _T.nelement, _T.is_floating_point,
    _T.is_complex, _T.__len__,
}


class _Product(torch.Tensor):
    """A deferred einsum: ``out`` the output's index letters, ``terms`` the operands and
    their letters (an operand is a plain tensor or a SparseTensor, never a _Product)."""

    @staticmethod
    def __new__(cls, out, terms, shape, dtype):
        grad = torch.is_grad_enabled() and any(t.requires_grad for t, _ in terms)
        self = torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=dtype,
                                                   device=torch.device("cpu"),
                                                   requires_grad=grad)
        self._out = out
        self._terms = tuple(terms)
        self._value = None
        self._eager = None   # how to compute it as written (the op and its operands)
        self._grad_mode = torch.is_grad_enabled()   # (computed later under the same)
        self._versions = tuple(_data(t)._version for t, _ in self._terms)
        return self

    def equation(self) -> str:
        return ",".join(ix for _, ix in self._terms) + "->" + self._out

    def compute(self) -> torch.Tensor:
        """The product's value (computed once)."""
        if self._value is None:
            ops = [t for t, _ in self._terms]
            if tuple(_data(t)._version for t in ops) != self._versions:
                raise RuntimeError(
                    f"scorch.compile: an operand of the deferred product {self.equation()} "
                    "was changed in place, outside torch's functions, after the product "
                    "was taken and before it was used; compute the product first")
            with torch.set_grad_enabled(self._grad_mode):
                self._value = self._computed_now(ops)
            self._eager = None
        return self._value

    def _computed_now(self, ops):
        # Without a sparse operand there is nothing to fuse: the ops run as written (the
        # same kernels, the same roundings as eager PyTorch).
        if not any(isinstance(t, SparseTensor) for t in ops):
            return self._eager()
        from ._torch_ops import einsum
        try:
            return einsum(self.equation(), *ops)
        except NotImplementedError:
            return self._eager()   # (what the compiler does not fuse runs as written)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Outside a compiled function (a deferred product kept after it returned): plain.
        if func in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        return _as_written(func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args, kwargs = _computed((args, kwargs or {}))
        return func(*args, **kwargs)


def _computed(tree):
    """tree (a tensor, number or tuple / list / dict of them) with its deferred products
    computed; the same object where it holds none."""
    return _mapped(tree, _Product.compute)


def _mapped(x, fn):
    if type(x) is _Product:
        return fn(x)
    if isinstance(x, (tuple, list)):
        ys = [_mapped(y, fn) for y in x]
        if all(y is z for y, z in zip(ys, x)):
            return x
        return type(x)(*ys) if hasattr(type(x), "_fields") else type(x)(ys)
    if isinstance(x, dict):
        ys = {k: _mapped(v, fn) for k, v in x.items()}
        return x if all(ys[k] is v for k, v in x.items()) else type(x)(ys)
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
    return t._values if isinstance(t, SparseTensor) else t


def _storage(t):
    try:
        return _data(t).untyped_storage().data_ptr()
    except (RuntimeError, TypeError):
        return None


# Tensor methods that write into their first operand besides the trailing-underscore ones.
_IN_PLACE = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
             "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
             "__ilshift__", "__irshift__", "__imatmul__"}


def _written(func, args, kwargs):
    """The tensors func writes into: its first operand for an in-place method, ``out``."""
    name = getattr(func, "__name__", "")
    out = kwargs.get("out")
    written = [out] if isinstance(out, torch.Tensor) else list(out or ())
    if args and isinstance(args[0], torch.Tensor) and (
            name in _IN_PLACE or (name.endswith("_") and not name.endswith("__"))):
        written.append(args[0])
    return written


def _settled(p: _Product):
    return p if p._value is None else p._value


def _leaf(x):
    """x as an operand of a product: a tensor (a deferred product computed), or None."""
    if isinstance(x, _Product):
        return x.compute()
    return x if isinstance(x, torch.Tensor) else None


def _term(x, ix):
    """(x, ix) as a term, a dense operand that is a permuted view of a contiguous tensor
    (``K.T``) given as that tensor with its letters permuted, so the kernel reads it in
    its own layout and no transposed copy is made."""
    if type(x) is not torch.Tensor or x.dim() < 2 or x.is_contiguous():
        return x, ix
    order = sorted(range(x.dim()), key=lambda d: -x.stride(d))
    y = x.permute(order)
    return (y, "".join(ix[d] for d in order)) if y.is_contiguous() else (x, ix)


def _fresh(n, taken=""):
    return "".join([c for c in _LETTERS if c not in taken][:n])


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


def _same_dtype(*ts):
    return all(t.dtype == ts[0].dtype for t in ts) and ts[0].dtype.is_floating_point


def _product_of(a, b, dims):
    """a times b as a matrix / vector product, where (a.dim(), b.dim()) is in ``dims``."""
    a, b = _leaf(a), _leaf(b)
    if a is None or b is None or not _same_dtype(a, b):
        return None
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
    if not isinstance(eq, str) or "->" not in eq or "." in eq:
        return None
    ins, out = eq.replace(" ", "").split("->")
    ins = ins.split(",")
    leaves = [_leaf(x) for x in ops]
    if len(ins) != len(leaves) or any(t is None for t in leaves):
        return None
    if not _same_dtype(*leaves) or not all(ix.isalpha() and len(set(ix)) == len(ix)
                                           for ix in ins):
        return None
    if len(set(out)) != len(out) or not set(out) <= set("".join(ins)):
        return None
    return _product(list(zip(leaves, ins)), out, leaves[0].dtype)


def _relabelled(p: _Product, out: str, taken: str):
    """p's terms with its output letters renamed to ``out`` and its summed ones to letters
    not in ``taken``."""
    summed = sorted(set("".join(ix for _, ix in p._terms)) - set(p._out))
    new = dict(zip(p._out, out))
    new.update(zip(summed, _fresh(len(summed), taken)))
    return [(t, "".join(new[c] for c in ix)) for t, ix in p._terms]


def _extendable(a) -> bool:
    """Whether a is a deferred product that an op may extend: one taken under the grad
    mode now in force (one taken under no_grad is a constant to what follows)."""
    return type(a) is _Product and a._grad_mode == torch.is_grad_enabled()


def _mul(a, b):
    """Elementwise a * b where one side is a deferred product: its equation gains the other
    side (a tensor on the output's trailing letters, or a 0-D scalar)."""
    if not _extendable(a):
        a, b = b, a
    if not _extendable(a):
        return None
    if _sparse_reads(a) + _sparse_reads(b) > _MAX_SPARSE:
        return None
    if isinstance(b, _Product):
        if not _extendable(b) or b.shape != a.shape or b.dtype != a.dtype or \
                len(a._terms) + len(b._terms) > _MAX_TERMS:
            return None
        tb = _relabelled(b, a._out, "".join(ix for _, ix in a._terms))
        return _Product(a._out, list(a._terms) + tb, a.shape, a.dtype)
    if isinstance(b, bool) or not isinstance(b, (numbers.Real, torch.Tensor)):
        return None
    if not isinstance(b, torch.Tensor):
        b = torch.tensor(b, dtype=a.dtype)
    if b.dtype != a.dtype or b.dim() > a.dim() or len(a._terms) >= _MAX_TERMS:
        return None
    ix = a._out[a.dim() - b.dim():]
    if tuple(b.shape) != tuple(a.shape[a.dim() - b.dim():]):
        return None
    return _Product(a._out, list(a._terms) + [(b, ix)], a.shape, a.dtype)


def _sparse_reads(x) -> int:
    if type(x) is _Product:
        return sum(isinstance(t, SparseTensor) for t, _ in x._terms)
    return int(isinstance(x, SparseTensor))


def _div(a, b):
    if _extendable(a) and isinstance(b, numbers.Real) and not isinstance(b, bool) \
            and b != 0:
        return _mul(a, 1.0 / b)
    return None


def _neg(a):
    return _mul(a, -1.0) if _extendable(a) else None


def _permuted(a, order):
    if not _extendable(a) or sorted(order) != list(range(a.dim())):
        return None
    out = "".join(a._out[d] for d in order)
    return _Product(out, a._terms, [a.shape[d] for d in order], a.dtype)


def _transpose(a, d0, d1):
    if not isinstance(a, _Product) or a.dim() == 0:
        return None
    order = list(range(a.dim()))
    d0, d1 = d0 % a.dim(), d1 % a.dim()
    order[d0], order[d1] = order[d1], order[d0]
    return _permuted(a, order)


def _t(a):
    return _permuted(a, list(range(a.dim()))[::-1]) if isinstance(a, _Product) and \
        a.dim() <= 2 else None


def _mT(a):
    return _transpose(a, -2, -1) if isinstance(a, _Product) and a.dim() >= 2 else None


def _permute(a, *dims):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    if not isinstance(a, _Product):
        return None
    return _permuted(a, [d % a.dim() for d in dims]) if len(dims) == a.dim() else None


def _sum(a, dim=None, keepdim=False, *, dtype=None):
    if not _extendable(a) or keepdim or dtype is not None:
        return None
    if dim is None:
        dims = range(a.dim())
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        if not dims or not a.dim():   # (torch sums everything over dim=[])
            return None
        dims = [d % a.dim() for d in dims]
    keep = [d for d in range(a.dim()) if d not in dims]
    out = "".join(a._out[d] for d in keep)
    return _Product(out, a._terms, [a.shape[d] for d in keep], a.dtype)


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
        if func in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        rule = _RULES.get(func)
        if rule is not None:
            # (a product computed already is its value: an in-place op may have changed it)
            args = _mapped(args, _settled)
            try:
                p = rule(*args, **kwargs)
            except TypeError:   # (a signature the rule does not take: run as written)
                p = None
            if p is not None:
                p._eager = functools.partial(_as_written, func, args, kwargs)
                self._pending.add(p)
                return p
        written = _written(func, args, kwargs) if self._pending else ()
        if written:
            # (a product of what this op changes is computed before the change, as eager
            # PyTorch would have computed it)
            changed = {_storage(t) for t in written} - {None}
            for p in list(self._pending):
                if p._value is None and any(_storage(t) in changed for t, _ in p._terms):
                    p.compute()
        return _as_written(func, args, kwargs)


def compile(fn=None):
    """``fn`` with its products deferred until their use is known (see the module's text):
    a dense product that a sparse tensor samples (``mask * (Q @ K.T)``) runs as one fused
    SDDMM kernel instead of being formed densely.  Use as ``scorch.compile(fn)`` or
    ``@scorch.compile``."""
    if fn is None:
        return compile

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with _Deferring():
            out = fn(*args, **kwargs)
        return _computed(out)

    return outside_graph(run)   # (under torch.compile: run eagerly, one graph break)
