"""Everything that knows about torch's dispatch: the ops SparseTensor.__torch_function__
routes, and autograd through compiled kernels.

``HANDLERS`` maps a torch callable (``torch.mm``, ``torch.Tensor.__add__``, ``F.linear``,
...) to a function of the same arguments.  Products and contractions become one
``scorch.einsum`` (a generated kernel); zero-preserving elementwise maps act on the stored
values only; sparse ± sparse is a union kernel; softmax is a segment reduction over the
values.  Anything else raises NotImplementedError naming the op and the formats.

Autograd runs on the *values*: a SparseTensor is a pattern around a values tensor, and
every differentiable op here is a function of those values (and of the dense operands),
so ``A.with_values(v)`` gives ``v.grad`` and ``A.requires_grad_()`` gives ``A.grad``.  The
gradient of an einsum w.r.t. an operand is another einsum; for a sparse operand it is
sampled at that operand's pattern (an SDDMM-like kernel), never densified.
"""
from __future__ import annotations

import functools
import math
import os
import numbers
import operator
import sys
import warnings
import weakref

import numpy as np
import torch
import torch.nn.functional as F

from ._compiler import (_LANG_EINSUM, _LANG_INDEX, _STRIDED, _compile, _einsum_run,
                        _remembered_run, _run, remembered, retire_prepared)
from ._compiler import einsum as _raw_einsum
from ._format import Format, _format_from_tuple
from . import _C, _tensor
from ._tensor import (_HANDLERS, VALUE_DTYPE_NAMES, VALUE_DTYPES, SparseTensor, _compiling,
                      compute_dtype, outside, outside_graph)

HANDLERS: dict = _HANDLERS   # the table SparseTensor.__torch_function__ reads
_LETTERS = "abcdefghlmnopqrstuvwxyz"   # batch / generic dims (no i, j, k clash below)


def _register(*funcs):
    def deco(fn):
        for f in funcs:
            HANDLERS[f] = fn
        return fn
    return deco


def _formats(*objs):
    out = set()
    for o in objs:
        if isinstance(o, SparseTensor):
            out.add(str(o.format))
        elif isinstance(o, (list, tuple)):
            out.update(_formats(*o))
    return sorted(out)


_TO_DENSE = "use .to_dense() to compute it densely"


def _refusal(name, formats, why, hint):
    why = f": {why}" if why else ""
    return f"scorch: {name} is not supported on SparseTensor (formats: {formats}){why}; {hint}"


def refuse(name, *objs, why="", hint=_TO_DENSE):
    """The NotImplementedError every refusal raises (one line, op and formats named)."""
    raise NotImplementedError(_refusal(name, ", ".join(_formats(*objs)), why, hint))


class AtenRefusal(NotImplementedError):
    """An aten op refused (SparseTensor.__torch_dispatch__): the torch function the user
    called, which decomposed to it, renames it on the way out (``renamed``)."""

    def __init__(self, op, objs, why, hint):
        self.op, self.formats = op, ", ".join(_formats(*objs))
        self.why, self.hint = why, hint
        super().__init__(_refusal(op, self.formats, why, hint))

    def renamed(self, func):
        name = torch.overrides.resolve_name(func) or getattr(func, "__name__", str(func))
        return NotImplementedError(_refusal(f"{name} (through {self.op})", self.formats,
                                            self.why, self.hint))


def refuse_aten(op, *objs, why="", hint=_TO_DENSE):
    raise AtenRefusal(str(op), objs, why, hint)


def refuse_out(name, out, *objs):
    """The refusal of an ``out=`` tensor (scorch never writes to its inputs), where given."""
    if out is not None:
        refuse(f"{name}(out=)", *objs, why="scorch never writes to its inputs")


def _dim_index(name, dim, n, extra=0):
    """dim of an n-D tensor (of n + extra dimensions to choose from, as unsqueeze has one
    more) as 0 .. n + extra - 1, or an IndexError naming the op."""
    if dim is None or not -n - extra <= dim < n + extra:
        raise IndexError(f"{name}: dim {dim} is out of range for a {n}-D tensor")
    return dim % (n + extra)


def _is_sparse(x):
    return isinstance(x, SparseTensor)


def _is_scalar(x):
    """A Python number (not a bool) or a 0-D dense tensor."""
    if isinstance(x, numbers.Number):
        return not isinstance(x, bool)
    return isinstance(x, torch.Tensor) and not _is_sparse(x) and x.dim() == 0


def _needs_grad(x):
    if isinstance(x, SparseTensor):
        return x._vals.requires_grad
    return isinstance(x, torch.Tensor) and x.requires_grad


def _pattern(a: SparseTensor) -> SparseTensor:
    """``a``'s pattern around its detached values (no autograd history)."""
    return a._rewrap(a._vals.detach())


# ---- coordinates of stored entries ------------------------------------------------------

def repeated(values: torch.Tensor, counts) -> torch.Tensor:
    """torch.repeat_interleave(values, counts) (counts an int or a 1-D tensor), the same
    dtype, without its OpenMP parallel region: torch's opens one on every call at grain
    size 1 (even for 8 counts), which costs milliseconds where the cores are contended;
    NumPy's serial repeat is as fast at 10^6 entries.  (A tensor that records autograd
    goes through torch's.)"""
    if values.requires_grad or values.device.type != "cpu":
        return torch.repeat_interleave(values, counts)
    return torch.from_numpy(np.repeat(values.numpy(), counts.numpy() if
                                      isinstance(counts, torch.Tensor) else counts))


def level_coords(a: SparseTensor):
    """Per level, the int64 coordinate of every stored entry (storage order)."""
    fmt, shape = a._format, a.shape
    cols, count = [], 1
    for k, kind in enumerate(fmt.kinds):
        size = shape[fmt.order[k]]
        if kind == 0:                               # dense
            cols = [repeated(c, size) for c in cols]
            cols.append(torch.arange(size, dtype=torch.int64).repeat(count))
            count *= size
        elif kind == 1:                             # compressed
            pos = a._pos[k].to(torch.int64)
            cols = [repeated(c, pos[1:] - pos[:-1]) for c in cols]
            lo, hi = int(pos[0]), int(pos[-1])
            cols.append(a._crd[k][lo:hi].to(torch.int64))
            count = hi - lo
        else:                                       # singleton
            cols.append(a._crd[k][:count].to(torch.int64))
    return cols


def dim_coords(a: SparseTensor):
    """Per dimension, the coordinate of every stored entry (storage order)."""
    cols = level_coords(a)
    out = [None] * a.dim()
    for k, d in enumerate(a._format.order):
        out[d] = cols[k]
    return out


def _linear_key(cols, sizes, n=1):
    """Each entry's row-major position over the dimensions ``cols`` hold (int64); with no
    dimensions, 0 for each of ``n`` entries."""
    key = torch.zeros(cols[0].shape[0] if cols else n, dtype=torch.int64)
    for c, s in zip(cols, sizes):
        key = key * s + c
    return key


def _same_arrays(x: SparseTensor, y: SparseTensor, any_order=False, compare=True) -> bool:
    """Whether x and y are one pattern: the same shape and format, the same entries in the
    same arrays (``any_order``: under any dimension order, as a permuted view's; without
    ``compare``, only the very arrays count, an O(1) check)."""
    fx, fy = x._format, y._format
    if any_order:
        if (fx.kinds, fx.unique) != (fy.kinds, fy.unique):
            return False
    elif fx != fy or x._shape != y._shape:
        return False
    if x.nnz != y.nnz:
        return False
    for a, b in zip(x._pos + x._crd, y._pos + y._crd):
        if a is b:   # (one array: nothing to compare)
            continue
        if not compare or (a is None) != (b is None):
            return False
        if not torch.equal(a.to(torch.int64), b.to(torch.int64)):
            return False
    return True


def align_values(r: SparseTensor, pattern: SparseTensor) -> torch.Tensor:
    """``r``'s values placed on ``pattern``'s stored entries (entries of ``r`` outside the
    pattern are dropped, entries of the pattern missing from ``r`` are zero).  A dense
    ``r`` (a result in an all-dense format comes back as a plain tensor) is gathered."""
    if not _is_sparse(r):
        return r[tuple(dim_coords(pattern))]
    if _same_arrays(r, pattern):
        return r._vals
    return _summed_at(pattern, dim_coords(r), r._vals)


def sampled_at(p: SparseTensor, dtype, product_of_ones) -> torch.Tensor:
    """One value per stored entry of ``p``: a product sampled at p's pattern, which
    ``product_of_ones(ones)`` computes from ones in that pattern (a gradient w.r.t. p's
    values).  A pattern that stores a coordinate more than once is sampled once per
    coordinate, and each of those entries takes its coordinate's value: the derivative
    of a sum of duplicates w.r.t. each of them."""
    uniq = _coalesce(_pattern(p)) if has_duplicates(p) else p
    vals = align_values(product_of_ones(uniq._rewrap(torch.ones(uniq.nnz, dtype=dtype))),
                        uniq)
    if uniq is not p:
        vals = vals[entry_positions(uniq, dim_coords(p))[0]]
    return vals


def entry_positions(pattern: SparseTensor, cols):
    """For coordinates given per dimension (int64 tensors), the position of each among
    ``pattern``'s stored entries and whether it is stored there at all."""
    order = pattern._format.order
    sizes = [pattern.shape[d] for d in order]
    kp = _linear_key(level_coords(pattern), sizes)
    kr = _linear_key([cols[d] for d in order], sizes)
    if kp.numel() == 0:
        return torch.zeros_like(kr), torch.zeros(kr.shape, dtype=torch.bool)
    idx = torch.searchsorted(kp, kr).clamp_(max=kp.numel() - 1)
    return idx, kp[idx] == kr


def _summed_at(pattern: SparseTensor, cols, values) -> torch.Tensor:
    """One value per stored entry of ``pattern``: the sum of ``values`` given at
    coordinates ``cols`` (per dimension) that fall on it (duplicates summed, ones it does
    not store dropped), differentiable w.r.t. ``values``."""
    idx, hit = entry_positions(pattern, cols)
    return _index_sum(pattern.nnz, idx[hit], values[hit])


def _index_sum(length, at, values) -> torch.Tensor:
    """A vector of ``length`` with ``values`` summed at positions ``at`` (differentiable);
    half dtypes are summed in float32 and rounded once, as the kernels do."""
    acc = compute_dtype(values.dtype)
    return torch.zeros(length, dtype=acc).index_add(0, at, values.to(acc)).to(values.dtype)


def summed_onto(out: SparseTensor, cols, values) -> SparseTensor:
    """``out``'s pattern around ``_summed_at(out, cols, values)``."""
    return out._rewrap(_summed_at(out, cols, values), requires_grad=True)


class _ToDenseFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, box, v):
        ctx.pattern = box[0]
        return box[0]._rewrap(v).to_dense()

    @staticmethod
    @outside_graph   # (loss.backward() inside torch.compile: no tracing into it)
    def backward(ctx, g):
        return None, g[tuple(dim_coords(ctx.pattern))]


def to_dense(a: SparseTensor) -> torch.Tensor:
    """a.to_dense() with autograd through the values: the gradient gathers the output's
    gradient at the stored coordinates."""
    return _ToDenseFn.apply((_pattern(a),), a._vals)


# ---- einsum with autograd ---------------------------------------------------------------

def _parse(expr: str):
    """(operand terms, output term, the canonical "ins->out" text)."""
    hit = _PARSED.get(expr) if isinstance(expr, str) else None
    if hit is not None:
        return hit
    text = expr.replace(" ", "")
    if "->" in text:
        lhs, out = text.split("->", 1)
    else:
        lhs = text
        letters = [c for c in lhs if c.isalpha()]
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ins = lhs.split(",")
    if len(_PARSED) >= 4096:
        _PARSED.clear()
    hit = _PARSED[expr] = (ins, out, ",".join(ins) + "->" + out)
    return hit


_PARSED: dict = {}   # expression text -> _parse's answer (the ins list is never written)


def _apply(fn, *args):
    """``fn.apply(*args)`` for an autograd Function of ours.  Without a functorch transform
    active, torch.autograd.Function.apply only unwraps functorch's dead wrappers before
    calling the C apply; calling that directly saves ~1.5 us a call.  Under a transform
    (torch.func.grad, vmap, jacrev, functional_call inside them) it is refused by name:
    torch's own refusal speaks of a setup_context these Functions do not define."""
    if torch._C._are_functorch_transforms_active():
        refuse_transforms()
    return fn._c_apply(*args)


def refuse_transforms():
    raise NotImplementedError(
        "scorch: torch.func transforms (torch.func.grad, vmap, jacrev, jacfwd, jvp) "
        "cannot see through scorch's kernels; use torch.autograd.grad or backward(), "
        "with torch.func.functional_call outside a transform if needed")


class _Spec:
    """What the autograd Function needs besides tensors (kept out of apply's tensor args).
    ``ops`` are the caller's operands (SparseTensors are their own patterns: their values
    are saved for backward as well); ``out_pattern`` is (shape, format, pos, crd, index
    dtype, the arrays' versions) of a sparse result, with no reference to its values
    (which would be a cycle through the graph)."""

    __slots__ = ("ins", "out", "expr", "ops", "out_format", "out_pattern")

    def __init__(self, ins, out, expr, ops, out_format):
        self.ins, self.out, self.expr, self.ops = ins, out, expr, ops
        self.out_format, self.out_pattern = out_format, None


def _with_pattern(pattern, values, requires_grad=False):
    shape, fmt, pos, crd, index_dtype, versions = pattern
    return SparseTensor(shape, fmt, pos, crd, values, requires_grad=requires_grad,
                        index_dtype=index_dtype, checked=True, versions=versions)


class _EinsumFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, spec, *vals):
        # vals[i] is spec.ops[i]'s values (or the dense operand itself): run on the ops.
        res = _einsum_run(spec.expr, spec.ops, spec.out_format)
        ctx.spec = spec
        ctx.save_for_backward(*vals)
        if _is_sparse(res):
            spec.out_pattern = (res._shape, res._format, res._pos, res._crd,
                                res._index_dtype, res._iv)
            return res._vals
        return res

    @staticmethod
    @outside_graph   # (loss.backward() inside torch.compile: no tracing into it)
    def backward(ctx, g):
        # (The gradients are einsums too: under create_graph=True, where grad mode is on
        # here, they record through the same route, so second derivatives come out right.)
        spec = ctx.spec
        vals = ctx.saved_tensors   # checks that no operand was modified in place
        G = g if spec.out_pattern is None else _with_pattern(spec.out_pattern, g.contiguous())
        grads = [None]
        for i, need in enumerate(ctx.needs_input_grad[1:]):
            grads.append(_einsum_grad(spec, i, spec.ops, G, vals[i]) if need else None)
        return tuple(grads)


_EinsumFn._c_apply = super(torch.autograd.Function, _EinsumFn).apply


def _backward_einsum(expr, *ops, out_format=None):
    """An einsum in a backward pass: the kernel alone, or under create_graph=True (grad
    mode on in the backward) the recording route, so that the gradient has a gradient."""
    if torch.is_grad_enabled():
        return einsum(expr, *ops, out_format=out_format)
    return _raw_einsum(expr, *ops, out_format=out_format)


def _einsum_grad(spec, i, ops, G, v):
    """d(sum(G * einsum(ops)))/d ops[i]: another einsum; sampled at the pattern of a
    sparse operand.  (No term repeats an index: einsum took those diagonals first.)"""
    mine = spec.ins[i]
    # An output that kept another sparse operand's pattern pairs entry by entry with
    # that operand: G joins its values (G_e * v_e).  With duplicates that is required (as
    # two operands each duplicate of one would meet every duplicate of the other); with
    # the very arrays (an SDDMM's output shares its mask's) it spares the kernel a merge
    # of two identical patterns (a coo or csf sampled_addmm's backward: 5-13x).
    def kept(o, t):   # (the output kept o's pattern, level by level under the same
        # indices: "ij,ij->ji" keeps it as a permuted view)
        return spec.out and _is_sparse(G) and _is_sparse(o) and \
            _same_arrays(G, o, any_order=True, compare=has_duplicates(o)) and \
            [spec.out[d] for d in G._format.order] == [t[d] for d in o._format.order]

    own = kept(ops[i], mine)
    joined = None if own else next((j for j, (t, o) in enumerate(zip(spec.ins, ops))
                                    if j != i and kept(o, t)), None)
    terms, operands = [], []
    if spec.out and joined is None:
        terms.append(spec.out)
        operands.append(G)
    for j, (t, o) in enumerate(zip(spec.ins, ops)):
        if j != i:
            terms.append(t)
            operands.append(o if j != joined else o._rewrap(G._vals * o._vals))
    if _is_sparse(ops[i]):
        pat = ops[i]
        if own:
            # The output has this operand's pattern, duplicates and all: output entry e
            # is entry e times the rest of the product at its coordinate, so entry e's
            # gradient is G's own entry e (not the sum over its coordinate) times that.
            rest = ",".join([mine] + terms[1:]) + "->" + mine
            return (G._vals * sampled_at(pat, G.dtype, lambda ones: _backward_einsum(
                rest, ones, *operands[1:]))).to(v.dtype)
        # (the output's format is inferred from the ones: the pattern's own, or where the
        # output cannot be assembled in that one (cd), the nearest it can, cc)
        grad = sampled_at(pat, G.dtype if spec.out else v.dtype, lambda ones: _backward_einsum(
            ",".join([mine] + terms) + "->" + mine, ones, *operands))
        if not spec.out:
            grad = grad * G
        return grad.to(v.dtype)
    avail = set(spec.out).union(*[set(t) for t in terms])
    keep = "".join(c for c in mine if c in avail)
    if terms:
        r = _backward_einsum(",".join(terms) + "->" + keep, *operands,
                             out_format="dense" if keep else None)
    else:   # (the operand alone, summed to a scalar: its gradient is G everywhere)
        r = torch.ones((), dtype=G.dtype)
    if _is_sparse(r):
        r = r.to_dense()
    if not spec.out:
        r = r * G
    # a dimension of 1 the operand was broadcast along: its gradient sums over the stretch
    stretched = [k for k, c in enumerate(keep) if v.shape[mine.index(c)] == 1 and r.shape[k] != 1]
    if stretched:
        r = r.sum(dim=stretched, keepdim=True)
    # an index no other term holds, or holds only at size 1 (the others were broadcast
    # along the operand's extent): the gradient does not depend on it, the same all along
    if r.shape != v.shape:
        r = r.reshape([r.shape[keep.index(c)] if c in keep else 1 for c in mine]).expand(v.shape)
    return r.to(v.dtype)


def einsum(expr: str, *ops, out_format=None, schedule=None):
    """Evaluate an einsum expression over sparse and dense operands with a compiled kernel.

    ``scorch.einsum("ij,jk->ik", A, X)`` with ``A`` a SparseTensor in any format.  The
    output format is inferred (dense unless the result keeps sparsity, e.g. SDDMM keeps the
    sampling operand's pattern, CSR @ CSR gives CSR) or set with ``out_format``; a dense
    result is a plain torch.Tensor.  ``schedule`` (a Schedule or its text) forces a
    schedule instead of the automatic one.  Autograd records through the values of sparse
    operands and through dense operands, as for ``torch.einsum``; the backward kernels
    are scheduled automatically, so ``schedule`` is refused while autograd records.
    """
    if _compiling():   # (torch.compile tracing: the call runs outside its graph)
        return outside(einsum)(expr, *ops, out_format=out_format, schedule=schedule)
    if type(expr) is str and "=" in expr:
        raise ValueError(f"scorch.einsum takes an einsum equation ('ij,jk->ik'), not "
                         f"{expr!r}: index notation goes through scorch.kernel(...)")
    if type(expr) is str and "." in expr:
        spelled = _ellipsis_spelled(expr, ops)
        return _as_written(expr, lambda: einsum(spelled, *ops, out_format=out_format,
                                                schedule=schedule))
    if out_format is None and schedule is None and type(expr) is str:
        r = remembered(expr, ops)   # (before the widening below: a kernel remembered for
        if r is not None:           # these dtypes ran them unwidened, which they need not)
            return r
    if type(expr) is str:
        ops = _widened_for_sum(expr, ops)
    if not isinstance(expr, str):
        raise TypeError(f"the expression must be a str, not {type(expr).__name__}")
    taken = _rewritten(expr, ops)
    if taken is not None:
        return _as_written(expr, lambda: einsum(taken[0], *taken[1], out_format=out_format,
                                                schedule=schedule))
    if _recording(ops):
        if schedule is not None:
            raise ValueError("scorch.einsum: schedule= sets one kernel's schedule, but autograd "
                             "is recording (its backward kernels are other expressions); run "
                             "it under torch.no_grad() or drop schedule=")
        return _einsum_autograd(*_parse(expr), ops, out_format)
    return _einsum_run(expr, ops, out_format, schedule)   # (errors quote the caller's text)


def as_compiled(expr: str, ops):
    """(equation, operands) that einsum compiles for ``expr`` over ``ops``: its '...'
    spelled out, diagonals taken, broadcast dimensions of sparse operands dropped
    (scorch.explain shows that kernel), integer operands widened where einsum widens
    them."""
    if "." in expr:
        expr = _ellipsis_spelled(expr, ops)
    ops = _widened_for_sum(expr, ops)
    taken = _rewritten(expr, ops)
    return taken if taken is not None else (expr, tuple(ops))


def _as_written(given: str, run):
    """``run()``, which computes the caller's equation ``given`` as another one (its
    '...' spelled out, diagonals taken, ...: as_compiled); an error of the compiler's,
    which quotes the equation it compiled, names the caller's too."""
    try:
        return run()
    except (ValueError, NotImplementedError) as e:
        text = str(e)
        if type(e) not in (ValueError, NotImplementedError) or given in text:
            raise
        text = text.split(_COMPILED_FROM)[0]   # (a rewritten rewrite: name the first only)
        raise type(e)(f"{text}{_COMPILED_FROM}{given!r})") from None


_COMPILED_FROM = "\n  (compiled from the equation "
# the letters a rewrite gives the indices it adds ('...', a 0-D operand's), those the
# equation does not use taken from z down
_SPARE_LETTERS = "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA"


def _ellipsis_spelled(expr: str, ops) -> str:
    """``expr`` with each '...' spelled out in letters it does not use, as torch.einsum
    reads it: an operand's '...' stands for the dimensions its letters do not name; the
    ellipses of all operands align at the right (so they broadcast as any index does);
    an implicit output puts them first, and an explicit output without '...' sums them."""
    text = expr.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(ops):
        raise ValueError(f"einsum(): the equation {expr!r} has {len(ins)} operands, "
                         f"{len(ops)} were given")
    for i, o in enumerate(ops):
        if not isinstance(o, torch.Tensor):
            raise TypeError(f"einsum(): operand {i} is a {type(o).__name__}, not a tensor")

    def checked(term, what):
        if "." in term and (term.count(".") != 3 or "..." not in term):
            raise ValueError(f"einsum(): {what} {term!r} has a '.' that is not part of one "
                             f"ellipsis ('...')")
        return term

    widths = []
    for i, (t, o) in enumerate(zip(ins, ops)):
        if "." not in checked(t, f"the subscripts of operand {i}"):
            widths.append(None)
            continue
        w = o.dim() - (len(t) - 3)
        if w < 0:
            raise ValueError(f"einsum(): operand {i} has {o.dim()} dimensions, fewer than "
                             f"its subscripts {t!r} name")
        widths.append(w)
    free = [c for c in _SPARE_LETTERS if c not in text]
    width = max((w for w in widths if w is not None), default=0)
    if width > len(free):
        raise ValueError(f"einsum(): the ellipsis stands for {width} dimensions, more than "
                         f"the {len(free)} letters the equation leaves")
    dims = "".join(free[:width][::-1])
    ins = [t if w is None else t.replace("...", dims[width - w:]) for t, w in zip(ins, widths)]
    if arrow:
        out = checked(out, "the output").replace("...", dims)
    else:
        joined = "".join(t.replace("...", "") for t in lhs.split(","))
        out = dims + "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    return ",".join(ins) + "->" + out


def _rewritten(expr, ops):
    """``(expr, ops)`` as the kernel computes them, or None where that is the call as it
    is.  Three things torch.einsum reads that a kernel cannot:

    - an operand whose term repeats an index ("ii", "iji"): its diagonal over those
      dimensions, the term keeping the index once ("ii->i" is the diagonal, "ii->" the
      trace).  A SparseTensor's is a SparseTensor of its stored entries whose
      coordinates agree (_sparse_diagonal), a dense operand's torch.diagonal's view.
      Where the repeated dimensions' sizes differ the call goes on unchanged, for the
      compiler to report it;
    - a SparseTensor's dimension of size 1 that another operand's size for the index
      stretches (broadcasts): the tensor at position 0 of it (``select``, which keeps
      its other levels), the term losing the index, as a broadcast operand does not
      depend on it; with every dimension stretched, its value as a 0-D operand (below).
      So no kernel broadcasts a SparseTensor, whose gradient is sampled at its own
      pattern; a dense operand is broadcast by the kernel itself (its gradient sums
      over the stretch).
    - a 0-D operand (an empty term, a scalar factor: "ij,->ij"): the same value as a
      1-element tensor under an index of size 1, which the kernel sums (one index for
      all of them: "ij,,->ij" is "ij,z,z->ij").

    All are differentiable, so the gradient reaches the operand through them."""
    repeats = _REPEATS.get(expr)
    if repeats is None:
        if len(_REPEATS) >= 4096:
            _REPEATS.clear()
        repeats = _REPEATS[expr] = any(len(set(t)) != len(t) or not t
                                       for t in _parse(expr)[0])
    if not repeats:   # (the common case, on every call autograd records: kept cheap)
        for o in ops:
            if type(o) is SparseTensor and 1 in o._shape:
                break
        else:
            return None
    ins, out, _ = _parse(expr)
    if len(ins) != len(ops) or not all(t.isascii() and t.isalpha() for t in ins if t) or \
            not all(isinstance(o, torch.Tensor) and o.dim() == len(t) for t, o in zip(ins, ops)):
        return None   # (an equation or operands the compiler reports)
    terms, taken, changed = list(ins), list(ops), False
    free = (c for c in _SPARE_LETTERS if c not in expr)
    one = None   # (the index every 0-D operand takes: each added index is a loop)
    for k, (t, o) in enumerate(zip(ins, ops)):
        if not t and o.layout is _STRIDED:
            one = next(free, "") if one is None else one
            terms[k], taken[k] = one, o.reshape(1)
            changed = True
        if len(set(t)) != len(t) and (_is_sparse(o) or o.layout is _STRIDED) and \
                all(o.shape[t.index(c)] == o.shape[d] for d, c in enumerate(t)):
            terms[k], taken[k] = _sparse_diagonal(o, t) if _is_sparse(o) else \
                _dense_diagonal(o, t)
            changed = True
    for k, (t, o) in enumerate(zip(terms, taken)):
        if not _is_sparse(o) or 1 not in o.shape:
            continue
        for d in reversed(range(len(t))):
            if o.shape[d] == 1 and any(
                    x.shape[u.index(t[d])] != 1 for u, x in zip(terms, taken) if t[d] in u):
                o, t = select(o, d, 0), t[:d] + t[d + 1:]
                changed = True
        if not t:   # (every dimension stretched: its one value, taken as a 0-D operand)
            one = next(free, "") if one is None else one
            t, o = one, o.reshape(1)
        terms[k], taken[k] = t, o
    return (",".join(terms) + "->" + out, tuple(taken)) if changed else None


_REPEATS: dict = {}   # equation text -> whether a term repeats an index or is empty


def _dense_diagonal(x: torch.Tensor, term: str):
    """(term with each index once, x's diagonal over the repeats: a view)."""
    while len(set(term)) != len(term):
        d2 = next(d for d, c in enumerate(term) if term.index(c) != d)
        d1 = term.index(term[d2])
        x = torch.diagonal(x, 0, d1, d2)   # (the diagonal becomes the last dimension)
        term = "".join(c for d, c in enumerate(term) if d not in (d1, d2)) + term[d1]
    return term, x


def _sparse_diagonal(a: SparseTensor, term: str):
    """(term with each index once in order of first appearance, the stored entries of
    ``a`` whose coordinates agree wherever term repeats an index, over the dimensions of
    each index's first appearance).  Its levels are a's of those dimensions in a's order;
    an index is compressed where any of its dimensions' levels is not dense (the diagonal
    of a csr matrix is a sparse vector).  Duplicates are summed; differentiable w.r.t. the
    values."""
    coords = dim_coords(a)
    first, keep = {}, None
    for d, c in enumerate(term):
        if c not in first:
            first[c] = d
            continue
        agree = coords[d] == coords[first[c]]
        keep = agree if keep is None else keep & agree
    dims = list(first.values())
    fmt = a._format
    sparse = {first[term[fmt.order[k]]] for k in range(a.dim()) if fmt.kinds[k] != 0}
    kept = _format_of_dims(fmt, dims, sparse)
    if any(fmt.kinds):
        # (a repeated index whose kept level is dense below the deepest sparse level, a
        # dropped one above it: the dense level would store every place of its rows)
        kept = _compressed_last(kept)
    cols = torch.stack([coords[d][keep] for d in dims])
    return "".join(first), _entries_of(a, [a.shape[d] for d in dims], cols,
                                       a._vals[keep], kept)


def _compressed_last(fmt: Format) -> Format:
    """fmt with its last level compressed where it is dense: a tensor built from some
    entries' coordinates in it stores exactly their places (a dense last level would
    store every place of their rows; the compiler's transposed copies follow the same
    rule, csrc/schedule/check.c concordant)."""
    if not fmt.kinds or fmt.kinds[-1] != 0:
        return fmt
    return _format_from_tuple(fmt.kinds[:-1] + (1,), fmt.unique, fmt.order)


def _entries_of(a: SparseTensor, shape, cols, values, fmt) -> SparseTensor:
    """A SparseTensor of ``shape`` in ``fmt`` holding entries taken from ``a``
    (coordinates ``cols`` [ndim, E], ``values``): duplicates summed, differentiable
    w.r.t. the values, int64 indices where a has them (else the narrowest that fits)."""
    from ._convert import _from_coords

    return _from_coords(shape, cols, values, fmt,
                        a.index_dtype if a.index_dtype == torch.int64 else None)


def _format_of_dims(fmt: Format, dims, sparse) -> Format:
    """The format of a tensor of some of ``fmt``'s dimensions (``dims``, in their new
    order), storing exactly the places of its entries: their levels in fmt's order,
    compressed where the dimension is in ``sparse``, dense elsewhere (levels every order
    can assemble from coordinates), but for one.  Where a sparse level is dropped (a csr's
    column selected, a diagonal over it), the trailing dense levels (no kept sparse level
    below them) would store every place of their rows:
    - the lowest of them above the deepest dropped sparse level is compressed instead
      (csr "dc" without its column level: "c", ``A[:, j]`` a sparse vector; "dcd"
      without its middle: "cd");
    - where none is above it and they are all the levels, the first is compressed (a
      "cd" row ``A[i]``: "c", storing the row's places where row i is stored and none
      where it is not; a dense "d" would store the row either way);
    - where a kept sparse level stands above them, they are exact as they are."""
    levels = [k for k, d in enumerate(fmt.order) if d in dims]
    kinds = ["c" if fmt.order[k] in sparse else "d" for k in levels]
    dropped = [k for k, d in enumerate(fmt.order) if d not in dims and fmt.kinds[k] != 0]
    tail = len(kinds)
    while tail and kinds[tail - 1] == "d":
        tail -= 1
    if dropped and tail < len(kinds):
        above = [p for p in range(tail, len(kinds)) if levels[p] < dropped[-1]]
        if above:
            kinds[above[-1]] = "c"
        elif tail == 0:
            kinds[0] = "c"
    return Format("".join(kinds), order=[dims.index(fmt.order[k]) for k in levels])


_SUMS_IN_INT64 = (torch.int32, torch.int16, torch.int8, torch.uint8)


def _widened_for_sum(expr, ops):
    """``ops``, their integer values as int64 where an operand has an index that the
    output has not and that every other operand has at extent 1 or not at all:
    torch.einsum sums such an index first, through torch.sum, which gives int64, and so
    the result is int64 ("ij->i", "ij,jk->ij", "ij,jk->", "ij,ij->i" with the second
    (m, 1); "ij->ji", "ij,jk->ik" sum none alone and keep the dtype; where torch then
    raises, mixing int64 with int8 in a product, scorch gives the int64 result).  With
    several operands an index of extent 1 is squeezed, not summed, and so is a 0-D
    operand's (the rewriting of "ij,->ij" gives it one).  A float operand makes the
    result float as it is.  Repeated coordinates are summed in the tensor's own dtype
    first (_summed_as)."""
    for x in ops:
        if (x._vals.dtype if type(x) is SparseTensor else
                getattr(x, "dtype", None)) in _SUMS_IN_INT64:
            break
    else:
        return ops
    if not all(isinstance(x, torch.Tensor) and not x.dtype.is_floating_point for x in ops):
        return ops
    ins, out, _ = _parse(expr)
    if len(ins) != len(ops):
        return ops

    def size(k, c):
        return (ops[k]._shape if type(ops[k]) is SparseTensor else ops[k].shape)[
            ins[k].index(c)]

    def summed_alone(k, c):   # (several operands: every other one holds it at extent 1)
        return c not in out and (len(ops) == 1 or size(k, c) != 1 and all(
            size(j, c) == 1 for j, t in enumerate(ins) if j != k and c in t))

    if not any(summed_alone(k, c) for k, s in enumerate(ins) for c in s):
        return ops
    return tuple(_summed_as(x, torch.int64) if isinstance(x, SparseTensor) else
                 x.to(torch.int64) for x in ops)


def _contract(expr, ops):
    """``einsum(expr, *ops)`` for a canonical ``expr`` ("ij,jk->ik"): straight to the
    kernel unless autograd records."""
    r = remembered(expr, ops)
    if r is not None:
        return r
    if _recording(ops):
        ins, out, canon = _parse(expr)
        return _einsum_autograd(ins, out, canon, ops, None)
    return _einsum_run(expr, ops)


def _recording(ops):
    """Whether autograd would record an op over ``ops``."""
    if torch.is_grad_enabled():
        for o in ops:
            if _needs_grad(o):
                return True
    return False


def _einsum_autograd(ins, out, canon, ops, out_format):
    if len(ins) != len(ops):
        raise ValueError(f"the expression has {len(ins)} operands, {len(ops)} were given")
    spec = _Spec(ins, out, canon, ops, out_format)
    res = _apply(_EinsumFn, spec, *[o._vals if _is_sparse(o) else o for o in ops])
    if spec.out_pattern is not None:
        return _with_pattern(spec.out_pattern, res, requires_grad=res.requires_grad)
    return res


# ---- sparse ± sparse / dense (a union kernel) -------------------------------------------

def _index_vars(n):
    return ",".join("ijklmnpq"[:n])


class _AddFn(torch.autograd.Function):
    """a + sign * b over same-shape operands (at least one sparse)."""

    @staticmethod
    def forward(ctx, spec, sign, va, vb):
        pa, pb, out_pattern_box = spec
        a = va if pa is None else pa._rewrap(va)
        b = vb if pb is None else pb._rewrap(vb)
        res = _add_kernel(a, b, sign)
        ctx.spec, ctx.sign = spec, sign
        if _is_sparse(res):
            out_pattern_box.append(_pattern(res))
            return res._vals
        return res

    @staticmethod
    @outside_graph   # (loss.backward() inside torch.compile: no tracing into it)
    def backward(ctx, g):
        pa, pb, box = ctx.spec
        G = box[0]._rewrap(g.contiguous()) if box else g
        grads = []
        for p, need, sign in ((pa, ctx.needs_input_grad[2], 1),
                              (pb, ctx.needs_input_grad[3], ctx.sign)):
            if not need:
                grads.append(None)
                continue
            if p is None:
                grads.append(G * sign)
                continue
            ix = "ijklmnpq"[:p.dim()]
            r = sampled_at(p, G.dtype, lambda ones: _backward_einsum(f"{ix},{ix}->{ix}", ones, G))
            grads.append((r * sign).to(p.dtype))
        return None, None, grads[0], grads[1]


def _add_kernel(a, b, sign):
    n = a.dim()
    ix = _index_vars(n)
    op = "+" if sign > 0 else "-"
    return _compile_index(f"C({ix}) = A({ix}) {op} B({ix})", a, b)


def _compile_index(text, *ops):
    return _run(*_compile(_LANG_INDEX, text, ops, None, None))


def _add(name, a, b, sign=1):
    """a + sign * b where a or b is sparse."""
    _no_complex(name, a, b)
    if sign < 0 and any(isinstance(x, bool) or isinstance(x, torch.Tensor) and
                        x.dtype == torch.bool for x in (a, b)):
        raise RuntimeError(f"{name}: subtraction, the `-` operator, with a bool tensor is "
                           "not supported (as torch's); use `~` or logical_not()")
    if isinstance(a, bool) or isinstance(b, bool):   # (a Python bool adds as 0 or 1)
        a, b = (int(x) if isinstance(x, bool) else x for x in (a, b))
    if _is_scalar(a) or _is_scalar(b):
        sc, other = (b, a) if _is_scalar(b) else (a, b)
        if _is_sparse(other) and isinstance(sc, torch.Tensor) and sc.requires_grad:
            refuse(name, a, b, why="a scalar that requires grad (its gradient would sum "
                                   "over every element, stored or not)")
        if _is_sparse(other) and float(sc) == 0:   # (values promoted as torch's: int + 0.0,
            if other is a:                         # before any negation: 0.0 - uint8 200
                fn = (lambda v: v + sc) if sign > 0 else (lambda v: v - sc)   # is -200)
            else:
                fn = (lambda v: sc + v) if sign > 0 else (lambda v: sc - v)
            return _map_values(other, fn, linear=True)
        refuse(name, a, b, why="adding a nonzero scalar is not zero-preserving")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return NotImplemented
    if sign > 0 and _is_sparse(a) and not _is_sparse(b) and \
            _called_from(("multi_head_attention_forward", "merge_masks"), 4):
        return _padded_mask(a, b)
    if a.shape != b.shape:
        _broadcastable(name, a, b)
        refuse(name, a, b, why=f"shapes {tuple(a.shape)} and {tuple(b.shape)} differ "
                                "(broadcasting is not supported for sparse addition)")
    if not _is_sparse(a) and not _is_sparse(b):
        return a + sign * b
    for x in (a, b):
        if not _is_sparse(x) and x.layout is not torch.strided:
            refuse(name, a, b, why=f"a {x.layout} operand; convert it with "
                                   "scorch.to_sparse")
    dtype = torch.promote_types(a.dtype, b.dtype)
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"scorch stores {VALUE_DTYPE_NAMES} values, the operands promote "
                        f"to {dtype}")
    pa = _pattern(a) if _is_sparse(a) else None
    pb = _pattern(b) if _is_sparse(b) else None
    va = a._vals if pa is not None else a
    vb = b._vals if pb is not None else b
    if not (torch.is_grad_enabled() and (va.requires_grad or vb.requires_grad)):
        res = _add_kernel(a, b, sign)
    else:
        box = []
        res = _AddFn.apply((pa, pb, box), sign, va, vb)
        if box:
            return box[0]._rewrap(res, requires_grad=res.requires_grad)
    # (two sparse operands: a's format, which the compiler gives as a plain tensor where
    # it is all dense)
    return _kept_sparse(res, a) if pa is not None and pb is not None else res


def _padded_mask(m: SparseTensor, pad: torch.Tensor) -> SparseTensor:
    """nn.MultiheadAttention's ``attn_mask + key_padding_mask`` for a sparse attn_mask m:
    a mask is what it attends, so the sum keeps m's stored entries (m broadcast over the
    batch and heads the padding mask has), each plus the padding's value there (-inf
    for a padded key); the places m does not store stay unattended.  (The tensor sum
    would attend them: m's unstored zeros plus the padding's zeros.)"""
    name = "nn.MultiheadAttention"
    try:
        shape = torch.broadcast_shapes(tuple(m.shape), tuple(pad.shape))
    except RuntimeError:
        _broadcastable(name, m, pad)
    if len(shape) != m.dim() or any(x not in (1, y) for x, y in zip(m.shape, shape)):
        refuse(name, m, pad, why=f"an attn_mask of shape {tuple(m.shape)} with a "
                                 f"key_padding_mask of shape {tuple(pad.shape)}")
    m = _expand(_coalesced(m), shape)   # (one mask for every batch and head: its
    at = tuple(dim_coords(m))                 # pattern in each slice)
    v = m._vals + pad.to(m.dtype).expand(shape)[at]
    return m._rewrap(v, requires_grad=v.requires_grad)


# ---- value maps -------------------------------------------------------------------------

def _map_values(a: SparseTensor, fn, linear=False):
    """a with fn applied to its values.  Entries that share coordinates (a coo's
    duplicates) are summed first unless fn is ``linear`` (fn(x + y) = fn(x) + fn(y):
    negation, scaling), as the dense tensor they stand for would be (relu(-2 + 1) is 0,
    relu(-2) + relu(1) is 1)."""
    if not linear:
        a = _coalesced(a)
    v = fn(a._vals)
    if v.dtype not in VALUE_DTYPES:
        raise TypeError(f"scorch stores {VALUE_DTYPE_NAMES} values; this op gives {v.dtype}")
    return a._rewrap(v, requires_grad=v.requires_grad)


_UNARY = {
    "neg": torch.neg, "negative": torch.neg, "abs": torch.abs, "absolute": torch.abs,
    "relu": torch.relu, "sqrt": torch.sqrt, "square": torch.square, "sin": torch.sin,
    "tan": torch.tan, "tanh": torch.tanh, "sinh": torch.sinh, "asin": torch.asin,
    "asinh": torch.asinh, "atan": torch.atan, "atanh": torch.atanh, "expm1": torch.expm1,
    "log1p": torch.log1p, "erf": torch.erf, "erfinv": torch.erfinv, "sign": torch.sign,
    "sgn": torch.sgn,
    "trunc": torch.trunc, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "frac": torch.frac, "deg2rad": torch.deg2rad, "rad2deg": torch.rad2deg,
    "fix": torch.trunc, "arcsin": torch.asin, "arcsinh": torch.asinh,
    "arctan": torch.atan, "arctanh": torch.atanh,
}


def _unary_handler(fn):
    def handler(a, *args, out=None, **kwargs):
        refuse_out(f"torch.{fn.__name__}", out, a)
        return _map_values(a, lambda v: fn(v, *args, **kwargs), linear=fn is torch.neg)
    return handler


for _name, _fn in _UNARY.items():   # (and torch.special's names for them)
    _funcs = [getattr(torch, _name, None), getattr(torch.Tensor, _name, None),
              getattr(torch.special, _name, None)]
    _register(*[f for f in _funcs if f is not None])(_unary_handler(_fn))
_register(torch.Tensor.__neg__)(_unary_handler(torch.neg))
_register(torch.Tensor.__abs__)(_unary_handler(torch.abs))


@_register(F.relu)
def _f_relu(a, inplace=False):
    if inplace:
        return in_place("F.relu(inplace=True)", a, lambda s: _map_values(s, torch.relu))
    return _map_values(a, torch.relu)


@_register(F.dropout, torch.dropout)
def _dropout(a, p=0.5, training=True, inplace=False):
    """Dropout on the stored values (zeros stay zeros), as sparse dropout in Kipf's GCN."""
    if inplace:
        return in_place("F.dropout(inplace=True)", a, lambda s: _dropout(s, p, training))
    return _map_values(a, lambda v: F.dropout(v, p, training), linear=not training or p == 0)


def _zero_checked(f, name):
    """A value map for ``f`` that is zero-preserving for some arguments only
    (hardtanh(min_val=1), clamp(min=1) are not): checked on the call's own arguments,
    which must be numbers."""
    def number(x):   # (a 0-D tensor bound reads as its number, as torch promotes it)
        return x.item() if (isinstance(x, torch.Tensor) and x.dim() == 0 and
                            not x.requires_grad and not _is_sparse(x)) else x

    def handler(a, *args, **kwargs):
        if kwargs.pop("inplace", False):
            return in_place(f"{name}(inplace=True)", a, lambda s: handler(s, *args, **kwargs))
        args = tuple(number(x) for x in args)
        kwargs = {k: number(x) for k, x in kwargs.items()}
        if not _is_sparse(a) or any(isinstance(x, torch.Tensor)
                                    for x in (*args, *kwargs.values())):
            refuse(name, a, *args, *kwargs.values(),
                   why="the input must be the SparseTensor and the other arguments numbers")
        if bool(f(torch.zeros(1, dtype=a.dtype), *args, **kwargs)[0] != 0):
            refuse(name, a, why="with these arguments f(0) != 0, so it is not "
                                "zero-preserving")
        return _map_values(a, lambda v: f(v, *args, **kwargs))
    return handler


for _fname in ("leaky_relu", "gelu", "silu", "hardtanh", "softsign", "tanhshrink",
               "hardshrink", "softshrink", "relu6", "elu", "selu", "celu", "mish"):
    _register(getattr(F, _fname))(_zero_checked(getattr(F, _fname), f"F.{_fname}"))
for _name in ("clamp", "clip", "clamp_min", "clamp_max", "nan_to_num"):
    _register(*[f for f in (getattr(torch, _name), getattr(torch.Tensor, _name))])(
        _zero_checked(getattr(torch, _name), f"torch.{_name}"))

# Not zero-preserving: refused with the reason.
for _name in ("exp", "exp2", "cos", "cosh", "sigmoid", "log", "log2", "log10",
              "reciprocal", "rsqrt", "acos", "erfc", "logit"):
    def _make_refusal(name):
        def handler(a, *args, **kwargs):
            refuse(f"torch.{name}", a, why=f"{name}(0) != 0, so it is not zero-preserving")
        return handler
    _h = _make_refusal(_name)
    _register(*[f for f in (getattr(torch, _name, None), getattr(torch.Tensor, _name, None),
                            getattr(torch.special, _name, None)) if f is not None])(_h)
for _fname in ("sigmoid", "softplus", "logsigmoid"):
    def _make_f_refusal(name):
        def handler(a, *args, **kwargs):
            refuse(f"F.{name}", a, why=f"{name}(0) != 0, so it is not zero-preserving")
        return handler
    _register(getattr(F, _fname))(_make_f_refusal(_fname))


@_register(torch.pow, torch.Tensor.pow, torch.Tensor.__pow__)
def _pow(a, p, *, out=None):
    refuse_out("torch.pow", out, a)
    if not _is_sparse(a):
        refuse("torch.pow", a, p, why="a scalar base with a sparse exponent is not "
                                      "zero-preserving")
    if (isinstance(p, torch.Tensor) and p.dim() == 0 and not p.requires_grad
            and not _is_sparse(p) and not p.dtype.is_complex and p.dtype is not torch.bool):
        p = p.item()   # (a 0-D exponent reads as its number, as clamp's bounds do)
    if isinstance(p, numbers.Number) and not isinstance(p, bool) and p > 0:
        return _map_values(a, lambda v: torch.pow(v, p))
    refuse("torch.pow", a, why="only a positive scalar exponent keeps zeros "
                               f"(got {p!r})")


# ---- elementwise binary -----------------------------------------------------------------

@_register(torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__)
def _add_handler(a, b, *, alpha=1, out=None):
    refuse_out("torch.add", out, a, b)
    return _add_scaled("torch.add", a, b, 1, alpha)


@_register(torch.sub, torch.subtract, torch.Tensor.sub, torch.Tensor.subtract,
           torch.Tensor.__sub__)
def _sub_handler(a, b, *, alpha=1, out=None):
    refuse_out("torch.sub", out, a, b)
    return _add_scaled("torch.sub", a, b, -1, alpha)


@_register(torch.Tensor.__rsub__, torch.rsub)
def _rsub_handler(a, b, *, alpha=1):
    return _add_scaled("torch.sub", b, a, -1, alpha)


def _add_scaled(name, a, b, sign, alpha):
    """``a + sign * alpha * b`` as torch computes it: alpha scales b in the promoted dtype
    (an int8 b times 3 does not wrap where the sum is float32), a float alpha is refused
    for integer operands, and a float16 / bfloat16 result is rounded once."""
    if isinstance(alpha, bool):
        raise RuntimeError(f"{name}: Boolean alpha only supported for Boolean results")
    if alpha == 1:
        return _add(name, a, b, sign)
    dt = torch.result_type(a, b)
    if isinstance(alpha, float) and not (dt.is_floating_point or dt.is_complex):
        raise RuntimeError(f"{name}: for integral input tensors, argument alpha must not be "
                           f"a floating point number")
    if dt not in _HALF:
        if isinstance(b, torch.Tensor) and b.dtype != dt:
            b = _as_dtype(b, dt)
        return _add(name, a, _mul(b, alpha), sign)
    return _rounded_once(lambda a, b: _add(name, a, _mul(b, alpha), sign), a, b, dt=dt)


_HALF = (torch.float16, torch.bfloat16)


def _rounded_once(fn, *tensors, dt=None):
    """``fn(*tensors)``; where its result is float16 / bfloat16 (``dt``, or the tensors'
    promoted dtype), computed on float32 copies and rounded once at the end, as torch's
    half-type kernels compute in float32: a product rounded to half and then added to
    (addmm, F.linear's bias, alpha scaling) would be rounded twice."""
    if dt is None:
        dt = _promoted(*tensors)
    if dt not in _HALF:
        return fn(*tensors)
    return _as_dtype(fn(*(_as_dtype(t, torch.float32) if isinstance(t, torch.Tensor) else t
                          for t in tensors)), dt)


def _promoted(*tensors):
    """The dtype torch promotes these tensors' dtypes to."""
    return functools.reduce(torch.promote_types, [t.dtype for t in tensors])


def _as_dtype(t, dt):
    """``t.to(dt)`` for a SparseTensor (from inside a handler, where torch functions do not
    reach scorch's) or a dense tensor."""
    return _to(t, dt) if _is_sparse(t) else t.to(dt)


def _dense_for(a: SparseTensor, d: torch.Tensor, name):
    """(letters of a, d squeezed to a's broadcast dims, its letters) or a refusal."""
    n = a.dim()
    la = "ijklmnpq"[:n]
    if d.dim() > n:
        refuse(name, a, d, why=f"a {d.dim()}-D operand would broadcast the {n}-D sparse "
                               "operand")
    ld, keep = "", []
    off = n - d.dim()
    for k in range(d.dim()):
        if d.shape[k] == a.shape[off + k]:
            ld += la[off + k]
            keep.append(k)
        elif d.shape[k] != 1:
            _broadcastable(name, a, d)
            refuse(name, a, d, why=f"shapes {tuple(a.shape)} and {tuple(d.shape)} would "
                                   "stretch the sparse operand's dimension of 1")
    dd = d.reshape([d.shape[k] for k in keep])
    return la, dd, ld


def _broadcastable(name, a, b):
    """torch's RuntimeError where a's and b's shapes do not broadcast at all (before any
    refusal of a broadcast scorch does not compute)."""
    try:
        torch.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except RuntimeError:
        raise RuntimeError(f"{name}: shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                           "broadcast") from None


def _no_complex(name, a, b):
    """A complex operand refused by name, as NotImplementedError: torch's operators
    (``A * D``) turn a TypeError into NotImplemented and Python's own message."""
    for x in (a, b):
        if isinstance(x, complex) or isinstance(x, torch.Tensor) and x.dtype.is_complex:
            refuse(name, a, b, why="scorch stores and computes no complex values")


def _mul(a, b, name="torch.mul"):
    _no_complex(name, a, b)
    if (_is_scalar(b) or isinstance(b, bool)) and _is_sparse(a):
        return _map_values(a, lambda v: v * b, linear=_scales_linearly(a, b))
    if (_is_scalar(a) or isinstance(a, bool)) and _is_sparse(b):
        return _map_values(b, lambda v: a * v, linear=_scales_linearly(b, a))
    if _is_scalar(a) or _is_scalar(b):        # scalar * dense (from addmm's alpha/beta)
        return a * b
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return NotImplemented
    if _is_sparse(a) and _is_sparse(b):
        if a.shape != b.shape:
            _broadcastable(name, a, b)
            refuse(name, a, b, why=f"shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
        ix = "ijklmnpq"[:a.dim()]
        return _kept_sparse(einsum(f"{ix},{ix}->{ix}", a, b), a)
    s, d = (a, b) if _is_sparse(a) else (b, a)
    if d.layout is not torch.strided:
        refuse(name, a, b, why=f"a {d.layout} operand; convert it with "
                               "scorch.to_sparse")
    if not s.dtype.is_floating_point and d.dtype.is_floating_point:
        s = _coalesced(s)   # (summed integers may wrap: sum, then scale)
    if d.dim() > s.dim():   # (a mask times each head's scores: s's pattern in every slice)
        return _mul_leading(name, s, d)
    la, dd, ld = _dense_for(s, d, name)
    if not ld:   # (one element: in d's dtype too, as a tensor of dims promotes)
        dt = torch.promote_types(s.dtype, d.dtype)
        return _map_values(s, lambda v: v.to(dt) * dd.reshape(()), linear=_finite(dd))
    return _kept_sparse(einsum(f"{la},{ld}->{la}", s, dd), s)


def _broadcast_leading(name, s: SparseTensor, lead) -> SparseTensor:
    """s repeated along new leading dimensions of sizes ``lead``, s's pattern in each
    slice (ones only of the leading shape: none of s's size)."""
    return _mul_leading(name, s, torch.ones(*lead, *[1] * s.dim(), dtype=s.dtype))


def _mul_leading(name, s: SparseTensor, d: torch.Tensor):
    """s * d where d has more dimensions than s: torch broadcasts s along d's leading
    ones, so each of those slices holds s's pattern (one 2-D mask times (h, n, n) scores):
    one einsum, whose output keeps them as dense levels over s's format."""
    extra = d.dim() - s.dim()
    _broadcastable(name, s, d)
    if any(x == 1 and y != 1 for x, y in zip(s.shape, d.shape[extra:])):
        refuse(name, s, d, why=f"shapes {tuple(s.shape)} and {tuple(d.shape)} would stretch "
                               "the sparse operand's dimension of 1")
    unit = [k for k in range(extra) if d.shape[k] == 1]
    if unit:   # (leading dims of 1: computed without, then dense levels of one position)
        rest = d.reshape([x for k, x in enumerate(d.shape) if k not in unit])
        r = _mul_leading(name, s, rest) if rest.dim() > s.dim() else _mul(s, rest, name)
        for k in unit:
            r = _unsqueeze(r, k)
        return r
    la, _, ld = _dense_for(s, torch.empty(d.shape[extra:], device="meta"), name)
    lx = "abcdefgh"[:extra]
    dd = d.reshape(*d.shape[:extra], *(s.shape[la.index(c)] for c in ld))
    return _all_dense_wrapped(einsum(f"{la},{lx}{ld}->{lx}{la}", s, dd), s.index_dtype)


def _all_dense_wrapped(r, index_dtype):
    """r, or where the compiler gave a plain tensor (an operand in an all-dense format
    stores every place, and so does the result), r as a SparseTensor of format dense,
    every place an entry (differentiably)."""
    if _is_sparse(r):
        return r
    from ._convert import to_sparse
    return to_sparse(r, "d" * r.dim(), index_dtype)


def _scales_linearly(a: SparseTensor, x) -> bool:
    """Whether a's repeated coordinates may be scaled by x one by one (summed after):
    x finite, and a's values floating or x an integer (a float factor of summed integers
    that wrapped differs from the sum of the factors' products)."""
    return _finite(x) and (a.dtype.is_floating_point or not torch.result_type(
        torch.empty(0, dtype=a.dtype), x).is_floating_point)


def _finite(x) -> bool:
    """Whether a scalar (a number or a one-element tensor) is finite: scaling by it is
    linear (inf * -2 + inf * 1 is nan, inf * -1 is not)."""
    return math.isfinite(_float_of(x))


def _float_of(x) -> float:
    """A scalar (a number or a one-element tensor) as a Python float."""
    return float(x.detach()) if isinstance(x, torch.Tensor) else float(x)


def _kept_sparse(r, a: SparseTensor):
    """An elementwise result in a's format: the compiler gives a plain tensor where an
    operand's format is all dense (it stores every position, so the result's entries
    are every position), and this wraps it back (differentiably), every position an
    entry: dropping the zeros lost another operand's explicit zeros (P + D with D of
    format "dense": P's stored zero, and with it its gradient)."""
    if _is_sparse(r):
        return r
    full = _all_dense_wrapped(r, a.index_dtype)
    if all(k == "dense" for k in a.format.levels):
        return full if a.format == full.format else full.to_format(a.format)
    return full.to_format(a.format, drop_zeros=False)


@_register(torch.mul, torch.multiply, torch.Tensor.mul, torch.Tensor.multiply,
           torch.Tensor.__mul__, torch.Tensor.__rmul__)
def _mul_handler(a, b, *, out=None):
    refuse_out("torch.mul", out, a, b)
    return _mul(a, b)


@_register(torch.div, torch.divide, torch.true_divide, torch.Tensor.div,
           torch.Tensor.divide, torch.Tensor.__truediv__, torch.Tensor.true_divide)
def _div_handler(a, b, *, rounding_mode=None, out=None):
    _no_complex("torch.div", a, b)
    if _is_sparse(a) and _is_scalar(b) and out is None:
        _refuse_zero_divisor("torch.div", a, b)
        if rounding_mode is not None:   # (floor / trunc of 0 / s is 0: not linear)
            return _map_values(a, lambda v: torch.div(v, b, rounding_mode=rounding_mode))
        return _map_values(a, lambda v: v / b, linear=a.dtype.is_floating_point)
    if _is_sparse(a) and isinstance(b, torch.Tensor) and not _is_sparse(b) and \
            b.layout is torch.strided and rounding_mode is None and out is None:
        # A / D (D broadcast, e.g. a degree vector): each stored value divided by D at its
        # coordinates; the implicit zeros stay zeros unless D has a zero (0/0 is nan)
        if b.dim() > a.dim():   # (a mask over each head's scores: a's pattern in every
            if bool(((b == 0) | b.isnan()).any()):   # slice, then divided as below)
                refuse("torch.div", a, b, why="the divisor has zeros or nans, which turn "
                                              "the implicit zeros into nan")
            a = _broadcast_leading("torch.div", a, b.shape[:b.dim() - a.dim()])
        if not a.dtype.is_floating_point:   # (summed integers may wrap: sum, then divide)
            a = _coalesced(a)
        la, dd, ld = _dense_for(a, b, "torch.div")
        if bool(((dd == 0) | dd.isnan()).any()):
            refuse("torch.div", a, b, why="the divisor has zeros or nans, which turn the "
                                          "implicit zeros into nan")
        if not ld:
            dt = torch.promote_types(a.dtype, b.dtype)
            return _map_values(a, lambda v: v.to(dt) / dd.reshape(()), linear=True)
        coords = dim_coords(a)
        at = tuple(coords[la.index(c)] for c in ld)
        return _map_values(a, lambda v: v / dd[at], linear=True)
    refuse("torch.div", a, b, why="only a sparse tensor divided by a scalar or a dense "
                                  "tensor keeps its zeros")


def _refuse_zero_divisor(name, a, b):
    """The refusal of a scalar divisor b that is zero or nan: dividing the implicit zeros
    of a by it gives nan."""
    s = _float_of(b)
    if s == 0 or math.isnan(s):
        refuse(name, a, why=f"dividing by {s} turns the implicit zeros into nan")


def _by_scalar(name, fn):
    """A sparse tensor's values through fn(v, s) for a nonzero scalar s (floor division,
    remainder, fmod: each keeps 0 at 0); other operands are refused by name."""
    def handler(a, b, *, out=None):
        refuse_out(name, out, a, b)
        if not (_is_sparse(a) and _is_scalar(b)):
            refuse(name, a, b, why="only a sparse tensor and a nonzero scalar keep the "
                                   "implicit zeros")
        _refuse_zero_divisor(name, a, b)
        return _map_values(a, lambda v: fn(v, b))
    return handler


_register(torch.floor_divide, torch.Tensor.floor_divide, torch.Tensor.__floordiv__)(
    _by_scalar("torch.floor_divide", torch.floor_divide))
_register(torch.remainder, torch.Tensor.remainder, torch.Tensor.__mod__)(
    _by_scalar("torch.remainder", torch.remainder))
_register(torch.fmod, torch.Tensor.fmod)(_by_scalar("torch.fmod", torch.fmod))


def _dense_plus_sparse_(sign, original):
    """x.add_(A) / x.sub_(A) / x += A of a dense x and a SparseTensor A of x's shape: A's
    stored values (times alpha, duplicates summed) added at their coordinates in place,
    as the dense A would be.  A SparseTensor x takes the sum in place where it keeps x's
    entries (``in_place``: B of x's entries); other operands reach ``original``."""
    def handler(x, other, *, alpha=1):
        if _is_sparse(x):
            add = _add_handler if sign == 1 else _sub_handler
            return in_place(f"torch.Tensor.{original.__name__}", x,
                            lambda s: add(s, other, alpha=alpha), other)
        if not _is_sparse(other) or x.layout is not torch.strided:
            return original(x, other, alpha=alpha)
        if tuple(other.shape) != tuple(x.shape):
            refuse(f"torch.Tensor.{original.__name__}", x, other,
                   why=f"the sparse operand's shape {tuple(other.shape)} is not the dense "
                       f"one's {tuple(x.shape)} (no broadcasting into a written tensor)")
        dt = torch.promote_types(x.dtype, other.dtype)
        if not torch.can_cast(dt, x.dtype):
            raise RuntimeError(f"result type {dt} can't be cast to the desired output type "
                               f"{x.dtype}")
        v = other._vals.to(dt) * (sign * alpha)
        return x.index_put_(tuple(dim_coords(other)), v.to(x.dtype), accumulate=True)
    return handler


_register(torch.Tensor.add_, torch.Tensor.__iadd__)(_dense_plus_sparse_(1, torch.Tensor.add_))
_register(torch.Tensor.sub_, torch.Tensor.__isub__)(_dense_plus_sparse_(-1, torch.Tensor.sub_))


def in_place(name, a, compute, *others):
    """``a`` (a SparseTensor asked to change in place) takes the values of ``compute(a)``,
    the op's out-of-place result, where that keeps a's stored entries: a scalar factor or
    divisor, a zero-preserving map, a SparseTensor of a's entries, a dense factor
    (optimizers' steps on a sparse gradient, ``clip_grad_norm_``).  Written into a's
    values array (its version counter moves, so what scorch kept of a is made again;
    views sharing the array see it).  Where autograd records, the op reads a copy of the
    values (it may save its input for backward, which the write would change).  Refused:
    a result with other entries, one that would give a a gradient history it does not
    have, and a piece of another tensor that torch's indexing would have made a view (a
    copy here: the write would not reach that tensor)."""
    if not _is_sparse(a):
        refuse(name, a, *others, why="the tensor written in place must be the SparseTensor")
    piece = _piece_of(a)
    if piece:
        refuse(name, a, *others, why=f"the tensor is a piece another one gave ({piece}), "
                                     "which in scorch holds a copy of its entries where "
                                     "torch's would be a view: written in place, it would "
                                     "not change the tensor it came from",
               hint="write the whole tensor, or .clone() the piece to write the copy")
    src = a
    if a._vals.requires_grad and torch.is_grad_enabled():
        src = a._rewrap(a._vals.clone(), requires_grad=True)
    r = through(name, compute, src)
    if not (_is_sparse(r) and _same_entries(r, a)):
        refuse(name, a, *others, why="in place, the result must keep the tensor's stored "
                                     "entries (a scalar factor, a zero-preserving map, a "
                                     "SparseTensor of the same entries)",
               hint="use the op out of place (x = x + y) or .to_dense()")
    if not torch.can_cast(r.dtype, a.dtype):
        raise RuntimeError(f"result type {r.dtype} can't be cast to the desired output type "
                           f"{a.dtype}")
    if r._vals.requires_grad and not a._vals.requires_grad and torch.is_grad_enabled():
        refuse(name, a, *others, why="in place, it would give the tensor a gradient "
                                     "history it does not have",
               hint="use the op out of place (x = x * w)")
    if r._vals is not a._vals:
        a._vals.copy_(r._vals)
    return a


def _same_entries(r: SparseTensor, a: SparseTensor) -> bool:
    """Whether r stores a's entries in a's storage order (its values then line up with
    a's): the same arrays, or the same coordinates in another format (a sum of two cd
    tensors comes back cc, the dense level's positions kept)."""
    if _same_arrays(r, a):
        return True
    if r._shape != a._shape or r.nnz != a.nnz or r._format.order != a._format.order:
        return False
    return all(torch.equal(x, y) for x, y in zip(dim_coords(r), dim_coords(a)))


def _piece(r, a, name):
    """r, a piece of a that torch's indexing would make a view of (a slice, a narrow, a
    selection, a split, unbind's): where it holds a copy of a's values, their storage is
    listed (``_PIECES``), so that an in-place write to it or to any view of it (``t()``,
    ``detach()``, ``A[1:3][None]``, all sharing that storage), which would not reach a,
    is refused (``in_place``)."""
    if _is_sparse(r) and r is not a and r._vals.numel():
        storage = r._vals.untyped_storage()
        if storage is not a._vals.untyped_storage():
            _PIECES[storage] = name
    return r


def _piece_of(a: SparseTensor):
    """The name of the op whose piece a's values are (or share storage with), or None."""
    return _PIECES.get(a._vals.untyped_storage()) if a._vals.numel() else None


# A piece's values storage -> the op's name (torch keeps one Python object per storage
# while any tensor holds it: the entry lives as long as the storage)
_PIECES = weakref.WeakKeyDictionary()


def _in_place(name, out_of_place):
    full = f"torch.Tensor.{name}"

    def handler(a, *args, **kwargs):
        if not _is_sparse(a):   # (a dense tensor written with a sparse operand: refused)
            refuse(full, a, *args, why="it would write the sparse operand's implicit zeros "
                   "into the dense tensor")
        return in_place(full, a, lambda s: out_of_place(s, *args, **kwargs), *args)
    return handler


def through(name, fn, *args, **kwargs):
    """fn(*args, **kwargs), its refusal renamed for ``name``, the in-place op the user
    called: "torch.Tensor.add_ (through torch.add) is not supported ..."."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as e:
        op, sep, rest = str(e).removeprefix("scorch: ").partition(" is not supported")
        if not sep or op.startswith(name):
            raise
        raise NotImplementedError(f"scorch: {name} (through {op}){sep}{rest}") from None


# In-place ops whose out-of-place handler keeps a's entries for some arguments (the
# handler refuses the others, or in_place does): the methods, torch's function forms
# where it has them, and the operators
for _name in ("abs", "absolute", "arcsin", "arcsinh", "arctan", "arctanh", "asin", "asinh",
              "atan", "atanh", "ceil", "clamp", "clamp_max", "clamp_min", "clip", "deg2rad",
              "div", "divide", "erf", "erfinv", "expm1", "fix", "floor", "floor_divide", "fmod",
              "frac", "log1p", "mul", "multiply", "nan_to_num", "neg", "negative", "pow",
              "rad2deg", "relu", "remainder", "round", "sgn", "sign", "sin", "sinh", "sqrt",
              "square", "tan", "tanh", "true_divide", "trunc"):
    _h = _in_place(_name + "_", _HANDLERS[getattr(torch.Tensor, _name)])
    _register(*[f for f in (getattr(torch.Tensor, _name + "_"), getattr(torch, _name + "_", None))
                if f is not None])(_h)
for _dunder, _name in (("__imul__", "mul"), ("__itruediv__", "div"),
                       ("__ifloordiv__", "floor_divide"), ("__imod__", "remainder"),
                       ("__ipow__", "pow")):
    _register(getattr(torch.Tensor, _dunder))(
        _in_place(_dunder, _HANDLERS[getattr(torch.Tensor, _name)]))
_register(torch.Tensor.zero_)(_in_place(
    "zero_", lambda a: _map_values(a, torch.zeros_like, linear=True)))


@_register(torch.lerp, torch.Tensor.lerp)
def _lerp(a, b, weight, *, out=None):
    """``torch.lerp(A, B, w)``, ``A + w * (B - A)``, of two SparseTensors (an EMA of sparse
    weights, torch.optim.swa_utils' ``get_ema_multi_avg_fn``): the sum over the union of
    their entries, in place (``lerp_``) where B has A's entries."""
    refuse_out("torch.lerp", out, a, b, weight)
    if not (_is_sparse(a) and _is_sparse(b)) or _is_sparse(weight):
        refuse("torch.lerp", a, b, weight,
               why="both ends SparseTensors and a scalar or dense weight (one dense end "
                   "gives a dense result)", hint="use .to_dense()")
    return _add_handler(a, _mul(_sub_handler(b, a), weight, "torch.lerp"))


_register(torch.Tensor.lerp_)(_in_place("lerp_", _lerp))

_FOREACH_SINGLE = {"norm": lambda t, ord=2, dtype=None: torch.linalg.vector_norm(
    t, ord, dtype=dtype), "max": torch.amax}


def _foreach(name):
    """torch._foreach_<op>(lists, ...) with a SparseTensor in a list (optimizers' and
    clip_grad_norm_'s foreach paths, an EMA's ``_foreach_lerp_``): the op on each
    tensor, as its single-tensor form (which takes a SparseTensor where it keeps the
    stored entries, and refuses by name where not); lists of scalars pair up too, and
    addcmul / addcdiv's scalars are each call's ``value``.  In place, the SparseTensors
    go first, so that a refusal leaves the dense tensors unwritten.  torch's own checks
    of the lists' lengths are repeated."""
    op = name[len("_foreach_"):]
    homes = (torch.Tensor, torch) if op.endswith("_") else (torch, torch.Tensor)
    single = _FOREACH_SINGLE.get(op) or getattr(homes[0], op, None) or \
        getattr(homes[1], op, None)
    if single is None:    # (maximum_, minimum_: no single in-place form; refused at aten)
        return None
    scaled = op.rstrip("_") in ("addcmul", "addcdiv")

    def handler(*args, **kwargs):
        sizes = [len(a) for a in args if isinstance(a, (list, tuple))]
        if not sizes or not sizes[0]:
            raise RuntimeError("Tensor list must have at least one tensor.")
        if any(n != sizes[0] for n in sizes):
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got "
                               f"{sizes[0]} and {next(n for n in sizes if n != sizes[0])}")
        n, values = sizes[0], None
        if scaled and "scalars" in kwargs:
            kwargs = dict(kwargs)
            args = (*args, kwargs.pop("scalars"))
        if scaled and len(args) == 4:          # (scalars: a list, or a tensor of them)
            values = args[3].tolist() if isinstance(args[3], torch.Tensor) else args[3]
            args = args[:3]
        first = next(a for a in args if isinstance(a, (list, tuple)))
        order = sorted(range(n), key=lambda i: not _is_sparse(first[i]))
        results = [None] * n
        with torch._C._EnableTorchFunction():
            for i in order:
                if values is not None:
                    kwargs = dict(kwargs, value=values[i] if isinstance(values, list)
                                  else values)
                results[i] = single(*[a[i] if isinstance(a, (list, tuple)) else a
                                      for a in args], **kwargs)
        return None if op.endswith("_") else results
    return handler


for _name in dir(torch):
    if _name.startswith("_foreach_") and _name not in ("_foreach_mm", "_foreach_powsum"):
        _h = _foreach(_name)
        if _h is not None:
            _register(getattr(torch, _name))(_h)


@_register(torch.Tensor.__rtruediv__)
def _rdiv_handler(a, b):
    refuse("torch.div", b, a, why="dividing by a sparse tensor divides by its zeros")


# ---- products ---------------------------------------------------------------------------

@_register(torch.einsum)
def _einsum_handler(expr, *ops):
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = tuple(ops[0])
    return einsum(expr, *ops)


def _matmul_form(da, db):
    """torch.matmul's einsum text for operands of da and db dimensions beyond _MATMUL's
    table, by torch's rule: batch dimensions aligned from the right, a 1-D operand a
    vector (4-D scores times 4-D values "abij,abjk->abik", "abij,bjk->abik", a batch
    times a vector "aij,j->ai"); made once per pair and kept in the table (the hot
    route's plain dict lookup misses it until then: the general route makes it)."""
    if not (1 <= min(da, db) and max(da, db) <= 10):
        return None
    ba, bb = max(da - 2, 0), max(db - 2, 0)
    batch = "abcdefgh"[:max(ba, bb)]
    a = batch[len(batch) - ba:] + ("j" if da == 1 else "ij")
    b = batch[len(batch) - bb:] + ("j" if db == 1 else "jk")
    expr = f"{a},{b}->{batch}{'i' if da > 1 else ''}{'k' if db > 1 else ''}"
    _MATMUL[(da, db)], _PRODUCT_KEY[expr] = expr, "product " + expr
    return expr


_MATMUL = {(2, 2): "ij,jk->ik", (2, 1): "ij,j->i", (1, 2): "j,jk->k", (1, 1): "i,i->",
           (3, 3): "bij,bjk->bik", (3, 2): "bij,jk->bik", (2, 3): "ij,bjk->bik"}
_MM, _MV, _BMM = ({k: _MATMUL[k]} for k in ((2, 2), (2, 1), (3, 3)))


# The key under which a SparseTensor remembers a torch product's kernel: not the einsum
# text's, since einsum stretches a dimension of 1 where torch's products refuse it, and a
# kernel that einsum compiled for such a stretch must not run a product.
_PRODUCT_KEY = {e: "product " + e for e in _MATMUL.values()}


def _multiplies(name, a, b, exprs):
    """torch's shape rule for a product: the contracted extents are equal (einsum would
    stretch one of 1), and bmm's batches too (matmul's broadcast)."""
    sa, sb = tuple(a.shape), tuple(b.shape)
    if not sa or not sb:
        return
    batches = sa[:-2], sb[:-2]   # (matmul broadcasts batches of 1, bmm none)
    if sa[-1] != (sb[0] if len(sb) == 1 else sb[-2]) or (
            exprs is _BMM and sa[0] != sb[0]) or (
            len(sa) > 2 and len(sb) > 2 and any(x != y and 1 not in (x, y) for x, y in
                                                zip(batches[0][::-1], batches[1][::-1]))):
        name = name or {id(_MM): "torch.mm", id(_MV): "torch.mv",
                        id(_BMM): "torch.bmm"}.get(id(exprs), "torch.matmul")
        raise RuntimeError(f"{name}: shapes {sa} and {sb} cannot be multiplied")


def _batch_of_one(expr, a, b):
    """Whether matmul broadcasts one operand's batch of 1 against the other's batch (any
    pair of batch dimensions aligned from the right; _multiplies checked they are 1)."""
    if a.dim() < 3 or b.dim() < 3:
        return False
    return any(x != y for x, y in zip(a.shape[-3::-1], b.shape[-3::-1]))


def sparse_dense_product(exprs, a, b):
    """The product of SparseTensor ``a`` and plain tensor ``b`` on the hot route (no
    autograd to record), or None where the general route must decide.  It makes no torch
    call on ``a`` (each costs ~0.2 us through the subclass, ~1 us outside
    DisableTorchFunctionSubclass), so SparseTensor.__matmul__ calls it directly."""
    expr = exprs.get((len(a._shape), b.dim()))
    if expr is None:
        return None
    key = _PRODUCT_KEY[expr]
    r = remembered(key, (a, b))
    if r is not None:
        return r
    if b.layout is not _STRIDED or _batch_of_one(expr, a, b) or (
            torch.is_grad_enabled() and (a._vals.requires_grad or b.requires_grad)):
        return None
    _multiplies(None, a, b, exprs)
    return _remembered_run(key, _LANG_EINSUM, expr, (a, b), None, None)


def _product(name, exprs, a, b):
    """The product ``exprs[(a.dim(), b.dim())]`` (canonical einsum text) of a and b."""
    if type(a) is SparseTensor and type(b) is torch.Tensor:
        r = sparse_dense_product(exprs, a, b)
        if r is not None:
            return r
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return NotImplemented
    expr = exprs.get((a.dim(), b.dim()))
    if expr is None and exprs is _MATMUL:
        expr = _matmul_form(a.dim(), b.dim())
    if expr is None:
        refuse(name, a, b, why=f"operands of {a.dim()} and {b.dim()} dimensions")
    if a.layout is not torch.strided or b.layout is not torch.strided:
        for x in (a, b):                      # (a SparseTensor's own layout is strided)
            if not _is_sparse(x) and x.layout is not torch.strided:
                refuse(name, a, b, why=f"a {x.layout} operand; convert it with "
                                       "scorch.to_sparse")
    _multiplies(name, a, b, exprs)
    if _batch_of_one(expr, a, b):   # (einsum drops a sparse operand's batch dimension of 1)
        return einsum(expr, a, b)
    if torch.is_grad_enabled() and (
            (a._vals if isinstance(a, SparseTensor) else a).requires_grad or
            (b._vals if isinstance(b, SparseTensor) else b).requires_grad):
        return _einsum_autograd(*_parse(expr), (a, b), None)
    return _einsum_run(expr, (a, b))   # (_contract, inlined)


_tensor._SPARSE_DENSE_MATMUL = functools.partial(sparse_dense_product, _MATMUL)


@_register(torch.mm, torch.Tensor.mm)
def _mm(a, b, *args, out=None, out_dtype=None):
    if out is not None or args:
        refuse("torch.mm", a, b, why="out= is not supported")
    if out_dtype is not None:
        refuse("torch.mm(out_dtype=)", a, b, why="the product's dtype follows its operands")
    return _product("torch.mm", _MM, a, b)


@_register(torch._amp_foreach_non_finite_check_and_unscale_)
def _amp_unscale(grads, found_inf, inv_scale):
    """GradScaler's unscale of gradients, a SparseTensor's (a ``Parameter(SparseTensor)``'s
    gradient) by its values, in place: scaling keeps the stored entries."""
    torch._amp_foreach_non_finite_check_and_unscale_(
        [g._vals if _is_sparse(g) else g for g in grads], found_inf, inv_scale)


@_register(torch.smm, torch.Tensor.smm, torch.sspaddmm, torch.Tensor.sspaddmm)
def _sparse_result_products(*args, **kwargs):
    """torch.smm / sspaddmm give torch's sparse layout a sparse product of a sparse and a
    dense matrix; scorch's is dense (``A @ X``, ``torch.addmm``).  Refused by name (they
    reached aten.sspaddmm.out, which read as an in-place write)."""
    name = "torch.smm" if len(args) == 2 else "torch.sspaddmm"
    refuse(name, *args, why="a sparse result of a product with a dense matrix",
           hint="use A @ X or torch.addmm, whose result is dense, or .to_dense()")


_FLIPPED = {torch.eq: torch.eq, torch.ne: torch.ne, torch.lt: torch.gt, torch.gt: torch.lt,
            torch.le: torch.ge, torch.ge: torch.le}


def _compare(name, a, b, op):
    """``a == b``, ``a != b``, ``a < b``, ... (``op``: torch.eq, ne, lt, le, gt, ge) with
    one side a SparseTensor and the other dense (of a shape that broadcasts to the sparse
    one's, or a scalar): a dense bool tensor, as torch's, the unstored places compared as
    the zeros they stand for (nn.Transformer compares a mask with a causal one; pruning
    compares ``A.abs() < t``)."""
    if _is_sparse(b):
        a, b, op = b, a, _FLIPPED[op]
    if _is_sparse(b):
        refuse(name, a, b, why="two SparseTensors compared (one is compared with a dense "
                               "tensor or a scalar)", hint="use A.to_dense() on one side")
    if not (_is_scalar(b) or isinstance(b, (bool, torch.Tensor))):
        refuse(name, a, b, why=f"a SparseTensor compared with a {type(b).__name__} (one is "
                               f"compared with a dense tensor or a scalar)")
    # (torch's promotion: a Python number or a 0-D tensor takes the tensor's dtype kind)
    dt = torch.result_type(torch.empty(1, dtype=a.dtype), b)
    d = torch.as_tensor(b, dtype=dt) if not isinstance(b, torch.Tensor) else b
    if d.layout is not _STRIDED:
        refuse(name, a, b, why=f"a {d.layout} operand; convert it with scorch.to_sparse")
    if d.dim() > a.dim() or torch.broadcast_shapes(tuple(a.shape), tuple(d.shape)) != a.shape:
        refuse(name, a, b, why=f"a dense operand of shape {tuple(d.shape)} that does not "
                               f"broadcast to the sparse one's {tuple(a.shape)}")
    if dt.is_complex and op not in (torch.eq, torch.ne):
        raise RuntimeError(f"{name}: comparison is not defined for complex tensors")
    full = d.to(dt).expand(a.shape)
    return _dense_at_entries(_coalesced(a), op(torch.zeros((), dtype=dt), full),
                             lambda v, at: op(v.to(dt), full[at]))


def _dense_at_entries(c: SparseTensor, unstored, stored):
    """A dense tensor of coalesced c's shape: ``unstored`` (broadcast) at the places c
    does not store, ``stored(values, coordinates)`` at those it does (the comparisons'
    and the value tests' dense bool results)."""
    out = unstored.expand(c.shape).clone()
    if c.nnz:
        at = tuple(dim_coords(c)) if c.dim() else ()
        out[at] = stored(c._vals.detach(), at)
    return out


def _comparison(name, op):
    def handler(a, b, *, out=None):
        refuse_out(name, out, a, b)
        return _compare(name, a, b, op)
    return handler


for _op, _fns in ((torch.eq, (torch.eq, torch.Tensor.eq)),
                  (torch.ne, (torch.ne, torch.not_equal, torch.Tensor.ne,
                              torch.Tensor.not_equal)),
                  (torch.lt, (torch.lt, torch.less, torch.Tensor.lt, torch.Tensor.less)),
                  (torch.le, (torch.le, torch.less_equal, torch.Tensor.le,
                              torch.Tensor.less_equal)),
                  (torch.gt, (torch.gt, torch.greater, torch.Tensor.gt, torch.Tensor.greater)),
                  (torch.ge, (torch.ge, torch.greater_equal, torch.Tensor.ge,
                              torch.Tensor.greater_equal))):
    _register(*_fns)(_comparison(f"torch.{_op.__name__}", _op))


def _comparable(x):
    return isinstance(x, (torch.Tensor, bool)) or _is_scalar(x)


def _comparison_operator(op):
    def handler(a, b):   # (A == None is False, as a dense tensor's: Python's fallback)
        return _compare(f"torch.{op.__name__}", a, b, op) if _comparable(b) else \
            NotImplemented
    return handler


for _op, _dunder in ((torch.eq, "__eq__"), (torch.ne, "__ne__"), (torch.lt, "__lt__"),
                     (torch.le, "__le__"), (torch.gt, "__gt__"), (torch.ge, "__ge__")):
    _register(getattr(torch.Tensor, _dunder))(_comparison_operator(_op))


def _value_test(name, fn):
    """isnan / isinf / isfinite / isposinf / isneginf / signbit of a SparseTensor: a dense
    bool tensor, as the comparisons give (scorch stores no bool values), the unstored
    places tested as the zeros they stand for, a coordinate's duplicates summed first."""
    def handler(a, *, out=None):
        refuse_out(name, out, a)
        return _dense_at_entries(_coalesced(a), fn(torch.zeros((), dtype=a.dtype)),
                                 lambda v, at: fn(v))
    return handler


for _fn in (torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf,
            torch.signbit):
    _register(_fn, getattr(torch.Tensor, _fn.__name__))(_value_test(f"torch.{_fn.__name__}",
                                                                     _fn))
_register(torch.Tensor.bool)(lambda a, memory_format=None: _to(a, torch.bool))


@_register(torch.Tensor.sparse_mask)
def _sparse_mask(x, mask):
    """``x.sparse_mask(M)``: x's elements at M's stored positions, in M's pattern and
    format (M's values unread; repeated coordinates summed first, as torch coalesces),
    differentiable w.r.t. x."""
    name = "torch.Tensor.sparse_mask"
    if _is_sparse(x) or not _is_sparse(mask):
        refuse(name, x, mask, why="x must be dense and the mask a SparseTensor")
    if tuple(x.shape) != tuple(mask.shape):
        raise RuntimeError(f"{name}: the mask's shape {tuple(mask.shape)} must be x's "
                           f"{tuple(x.shape)}")
    from ._convert import _check_values_dtype
    _check_values_dtype(x.dtype, f"values ({name})")
    m = _coalesced(mask)
    v = x[tuple(dim_coords(m))] if m.dim() else x.reshape(1).expand(m.nnz)
    return m._rewrap(v, requires_grad=v.requires_grad)


@_register(torch.sparse.mm)
def _sparse_mm(a, b, reduce="sum"):
    """torch.sparse.mm, with ``reduce`` over each row's stored entries as torch's for a
    CSR matrix and a dense one (GNN mean / max aggregation): "sum" is the product; "mean"
    divides each row of it by the row's stored entries (duplicates summed first); "amax"
    / "amin" take the extreme of the row's products A[i,j] * B[j,:] (``_mm_extreme``).
    A row with no entries gives 0; differentiable."""
    if reduce == "sum":
        return _mm(a, b)
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)   # (torch's aliases)
    if reduce not in ("mean", "amax", "amin"):
        raise ValueError(f"torch.sparse.mm: reduce must be 'sum', 'mean', 'amax' or 'amin', "
                         f"not {reduce!r}")
    if not (_is_sparse(a) and a.dim() == 2 and isinstance(b, torch.Tensor) and
            not _is_sparse(b) and b.dim() == 2 and b.layout is _STRIDED):
        refuse(f"torch.sparse.mm(reduce={reduce!r})", a, b,
               why="reduce= takes a sparse matrix and a dense matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"torch.sparse.mm: mat1 and mat2 shapes cannot be multiplied "
                           f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    c = _coalesced(a)
    if reduce == "mean":
        if not torch.promote_types(a.dtype, b.dtype).is_floating_point:
            raise TypeError(f"torch.sparse.mm(reduce='mean') needs floating-point values, "
                            f"got {a.dtype} and {b.dtype}")
        count = _row_entries(c).clamp_(min=1)
        dtype = torch.promote_types(c.dtype, b.dtype)
        if c.dtype == b.dtype == dtype and dtype in (torch.float32, torch.float64):
            # one kernel: each row's sum scaled by 1 / count as its tile is stored
            return einsum("ij,jk,i->ik", c, b, 1.0 / count.to(dtype))
        return _mm(c, b) / count[:, None]   # (the product's floating dtype, as promoted)
    dtype = torch.promote_types(c.dtype, b.dtype)
    if dtype.is_floating_point and c.nnz and b.numel():
        return _mm_extreme(c, b.to(dtype), reduce, dtype)
    rows, cols = dim_coords(c)
    prod = c._vals[:, None] * b[cols]
    out = torch.zeros(a.shape[0], b.shape[1], dtype=prod.dtype)
    return out.scatter_reduce(0, rows[:, None].expand_as(prod), prod, reduce,
                              include_self=False)


def _row_entries(c: SparseTensor):
    """The number of stored entries in each row of matrix c (int64): its pos array's
    steps where c is csr-like, else a count of its entries' rows."""
    fmt = c._format
    if fmt.order == (0, 1) and fmt.kinds == (0, 1):
        return c._pos[1].diff().to(torch.int64)
    return torch.bincount(dim_coords(c)[0], minlength=c.shape[0])


def _mm_extreme(c: SparseTensor, b, reduce, dtype):
    """``torch.sparse.mm(c, b, reduce="amax" / "amin")`` of a coalesced matrix and a dense
    one of floating ``dtype``.  scorch's compiler has no max reduction yet, so the values
    come from torch's CSR reduce kernel (handed c's arrays as a CSR; another format is
    converted at each call), with the entry that gave each output place where a gradient
    is wanted; the gradient is ``_MmExtreme``'s, all of it to that entry, as torch's.
    Before, every call formed the nnz x K products (1.6 GB and 10x torch's time on a
    graph of a million edges at K = 64)."""
    if c._format.name != "csr":
        c = c.to_format("csr", drop_zeros=False)   # (a dense level's zeros are entries)
    pos, cols = c._pos[1], c._crd[1]
    vals = c._vals.to(dtype)
    if torch.is_grad_enabled() and (vals.requires_grad or b.requires_grad):
        return _MmExtreme.apply(vals, b, pos, cols, c.shape, reduce)
    return _torch_mm_extreme(vals, b, pos, cols, c.shape, reduce, False)[0]


def _torch_mm_extreme(vals, b, pos, cols, shape, reduce, with_arg):
    """torch's CSR reduce kernel over (pos, cols, vals): the row extremes and, with_arg,
    each place's entry (nnz where its row has none; torch computes it only for an input
    that requires grad, under grad mode)."""
    with warnings.catch_warnings():   # (torch's "CSR support is in beta" notice)
        warnings.simplefilter("ignore", UserWarning)
        if not with_arg:   # (torch.sparse.mm: ~10 % faster than the op that also gives arg)
            t = torch.sparse_csr_tensor(pos, cols, vals.detach(), size=tuple(shape),
                                        check_invariants=False)
            return torch.sparse.mm(t, b.detach(), reduce=reduce), None
        with torch.enable_grad():
            t = torch.sparse_csr_tensor(pos, cols, vals.detach().requires_grad_(),
                                        size=tuple(shape), check_invariants=False)
            out, arg = torch.ops.aten._sparse_mm_reduce_impl(t, b.detach(), reduce)
    return out.detach(), arg


class _MmExtreme(torch.autograd.Function):
    """The row extremes of A[i,j] * B[j,:] over A's stored entries, with their gradient:
    each output place's gradient goes to the one entry whose product gave it (the first
    stored one where products tie: torch.sparse.mm's rule, and PyG's scatter max's), so
    the backward costs a few gathers of the output's size, not of the nnz x K products.
    Written in torch ops that record, so a second backward works."""

    @staticmethod
    def forward(ctx, vals, b, pos, cols, shape, reduce):
        out, arg = _torch_mm_extreme(vals, b, pos, cols, shape, reduce, True)
        ctx.save_for_backward(vals, b, cols, arg)
        return out

    @staticmethod
    def backward(ctx, g):
        vals, b, cols, arg = ctx.saved_tensors
        nnz = vals.shape[0]
        won = arg < nnz                       # (places of rows with no entries: none)
        e = torch.where(won, arg, 0)          # (their gradient is masked to 0 below)
        j = cols.long()[e]                    # place (i, k) came from B[j[i, k], k]
        gw = torch.where(won, g, 0)
        gv = gb = None
        if ctx.needs_input_grad[0]:
            gv = torch.zeros(nnz, dtype=vals.dtype).index_add(
                0, e.reshape(-1), (gw * b.gather(0, j)).reshape(-1))
        if ctx.needs_input_grad[1]:
            gb = torch.zeros(b.shape, dtype=b.dtype).scatter_add(0, j, gw * vals[e])
        return gv, gb, None, None, None, None


@_register(torch.matmul, torch.linalg.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)
def _matmul(a, b, *, out=None):
    refuse_out("torch.matmul", out, a, b)
    return _product("torch.matmul", _MATMUL, a, b)


@_register(torch.linalg.matrix_power, torch.matrix_power, torch.Tensor.matrix_power)
def _matrix_power(a, n, *, out=None):
    """``A^n`` of a square sparse matrix (a graph's n-hop adjacency): sparse products by
    repeated squaring, sparse (n = 0: the identity, in csr); a negative n (an inverse)
    and a batch of matrices are refused."""
    name = "torch.linalg.matrix_power"
    refuse_out(name, out, a)
    if a.dim() != 2 or a.shape[0] != a.shape[1]:
        if a.dim() >= 2 and a.shape[-1] == a.shape[-2]:
            refuse(name, a, why="a batch of matrices")
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are "
                           f"{a.shape[-2] if a.dim() >= 2 else ''} by {a.shape[-1]} matrices")
    n = operator.index(n)
    if n < 0:
        refuse(name, a, why="a negative power is an inverse, which is dense",
               hint="use .to_dense()")
    if n == 0:
        from ._convert import to_sparse
        return to_sparse(torch.eye(a.shape[0], dtype=a.dtype), "csr")
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else _matmul(result, base)
        n >>= 1
        if n:
            base = _matmul(base, base)
    return result.clone() if result is a else result     # (n = 1: a copy, as torch's)


@_register(torch.Tensor.__rmatmul__)
def _rmatmul(a, b):
    return _matmul(b, a)


def _vector_product(name, expr):
    """torch.dot / inner of two vectors ("i,i->") and torch.outer / ger ("i,j->ij") with a
    1-D SparseTensor (a column ``A[:, j]``): the einsum (the outer product sparse where
    an operand is: its stored places times the other's)."""
    def handler(a, b, *, out=None):
        refuse_out(name, out, a, b)
        if not all(isinstance(t, torch.Tensor) and t.dim() == 1 for t in (a, b)):
            raise RuntimeError(f"{name}: 1D tensors expected, but got "
                               f"{getattr(a, 'dim', lambda: '?')()}D and "
                               f"{getattr(b, 'dim', lambda: '?')()}D tensors")
        if expr == "i,i->" and a.dtype != b.dtype:
            raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                               f"{str(a.dtype).removeprefix('torch.').capitalize()} and "
                               f"{str(b.dtype).removeprefix('torch.').capitalize()}")
        if expr == "i,i->" and a.shape[0] != b.shape[0]:
            raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.shape[0]}] and "
                               f"src [{b.shape[0]}] to have the same number of elements, but "
                               f"got {a.shape[0]} and {b.shape[0]} elements respectively")
        return einsum(expr, a, b)
    return handler


_register(torch.dot, torch.Tensor.dot)(_vector_product("torch.dot", "i,i->"))
_register(torch.outer, torch.Tensor.outer, torch.ger, torch.Tensor.ger)(
    _vector_product("torch.outer", "i,j->ij"))


@_register(torch.mv, torch.Tensor.mv)
def _mv(a, x, *, out=None):
    refuse_out("torch.mv", out, a, x)
    return _product("torch.mv", _MV, a, x)


@_register(torch.bmm, torch.Tensor.bmm)
def _bmm(a, b, *, out=None, out_dtype=None):
    refuse_out("torch.bmm", out, a, b)
    if out_dtype is not None:
        refuse("torch.bmm(out_dtype=)", a, b, why="the product's dtype follows its operands")
    return _product("torch.bmm", _BMM, a, b)


def add_product_scalars(dtype, alpha, beta):
    """(alpha, beta) as torch's add-products take them: truncated to integers where the
    result (of ``dtype``) is an integer tensor (its kernels cast them: 0.5 is 0)."""
    if dtype.is_floating_point:
        return alpha, beta
    return int(alpha), int(beta)


def _added(name, inp, p, beta, alpha):
    """``beta * inp + alpha * p`` as torch's add-products compute it (``inp`` is not read
    where beta is 0, so its nan and inf do not reach the result; its gradient is zero).
    ``inp`` must broadcast to the product's shape (torch expands it)."""
    shape, want = tuple(inp.shape), tuple(p.shape)
    if len(shape) > len(want) or any(s not in (1, w) for s, w in
                                     zip(shape[::-1], want[::-1])):
        raise RuntimeError(f"{name}: the input's shape {shape} does not broadcast to the "
                           f"product's shape {want}")
    alpha, beta = add_product_scalars(torch.promote_types(p.dtype, inp.dtype), alpha, beta)
    if alpha != 1:
        p = _mul(p, alpha)
    if beta == 0:
        if inp.requires_grad and not _is_sparse(inp) and not _is_sparse(p):
            p = p + torch.where(inp.isfinite(), inp, 0) * 0   # (zeros, connected)
        return p
    i = inp if beta == 1 else _mul(inp, beta)
    if not _is_sparse(i) and not _is_sparse(p):
        return i + p              # dense input broadcast onto a dense product, as torch
    return _add(name, i, p, 1)


@_register(torch.addmm, torch.Tensor.addmm)
def _addmm(inp, mat1, mat2, *, beta=1, alpha=1, out=None):
    refuse_out("torch.addmm", out, inp, mat1, mat2)
    return _added_product("torch.addmm", _mm, inp, mat1, mat2, beta, alpha)


@_register(torch.addmv, torch.Tensor.addmv)
def _addmv(inp, mat, vec, *, beta=1, alpha=1, out=None):
    refuse_out("torch.addmv", out, inp, mat, vec)
    return _added_product("torch.addmv", _mv, inp, mat, vec, beta, alpha)


@_register(torch.baddbmm, torch.Tensor.baddbmm)
def _baddbmm(inp, batch1, batch2, *, beta=1, alpha=1, out=None):
    refuse_out("torch.baddbmm", out, inp, batch1, batch2)
    if _is_sparse(inp) and _called_from("multi_head_attention_forward", 4):
        return _mha_weights_scores(inp, batch1, batch2, beta, alpha)
    return _added_product("torch.baddbmm", _bmm, inp, batch1, batch2, beta, alpha)


def _dense_added_product_(name, original, out_of_place):
    """``out.addmm_(A, X)`` / ``addmv_`` / ``baddbmm_`` of a dense ``out`` (an
    accumulator) with a sparse operand: the add-product computed out of place, then
    copied into ``out`` (its shape kept, no broadcasting into it, and its dtype, as torch's
    in-place ops).  A SparseTensor ``out`` reaches ``original`` (refused: the result
    is dense)."""
    def handler(inp, *args, beta=1, alpha=1):
        if _is_sparse(inp):
            return original(inp, *args, beta=beta, alpha=alpha)
        r = out_of_place(inp, *args, beta=beta, alpha=alpha)
        if tuple(r.shape) != tuple(inp.shape):
            raise RuntimeError(f"{name}: the product's shape {tuple(r.shape)} is not the "
                               f"written tensor's {tuple(inp.shape)}")
        if not torch.can_cast(r.dtype, inp.dtype):
            raise RuntimeError(f"{name}: result type {r.dtype} can't be cast to the desired "
                               f"output type {inp.dtype}")
        return inp.copy_(r)
    return handler


for _method, _of in ((torch.Tensor.addmm_, _addmm), (torch.Tensor.addmv_, _addmv),
                     (torch.Tensor.baddbmm_, _baddbmm)):
    _register(_method)(_dense_added_product_(f"torch.Tensor.{_method.__name__}", _method, _of))


def _shape_in_place(name, out_of_place):
    def handler(a, *args, **kwargs):
        refuse(f"torch.Tensor.{name}", a, why="a SparseTensor's shape does not change in "
                                              "place", hint=f"use A = A.{out_of_place}, "
                                              "the same arrays under the new shape")
    return handler


for _name, _of in (("t_", "t()"), ("transpose_", "transpose(d0, d1)"),
                   ("swapdims_", "swapdims(d0, d1)"), ("swapaxes_", "swapaxes(d0, d1)"),
                   ("squeeze_", "squeeze(...)"), ("unsqueeze_", "unsqueeze(d)")):
    _register(getattr(torch.Tensor, _name))(_shape_in_place(_name, _of))


@_register(torch.Tensor.new_zeros)
def _new_zeros(a, *args, **kwargs):
    """Refused by name: torch.autograd.gradcheck calls it on its inputs (it perturbs every
    place of a dense input, which a SparseTensor's unstored places are not); the hint
    is the check that works, over the stored values."""
    refuse("torch.Tensor.new_zeros", a, why="a SparseTensor makes no new tensors of other "
                                            "shapes",
           hint="use torch.zeros(...); to gradcheck a function of a SparseTensor A, check it "
                "over the stored values: gradcheck(lambda v: f(A.with_values(v)), "
                "(A.values().detach().requires_grad_(),))")


@_register(torch.Tensor.__setitem__)
def _setitem(a, index, value):
    """``x[index] = A`` into a dense x is refused as ``x.copy_(A)`` is (the dense tensor
    takes a SparseTensor's entries through ``A.to_dense()``); a SparseTensor x reaches
    torch (refused: an in-place write)."""
    if not _is_sparse(a):
        if not _is_sparse(value):   # (the index is the SparseTensor: x[A] = v)
            refuse("Tensor.__setitem__", index, why="a SparseTensor as the index",
                   hint="index with a dense bool or integer tensor (A.to_dense() != 0)")
        refuse("Tensor.__setitem__", a, value, why="a dense tensor takes a sparse one's "
                                                   "entries through value.to_dense()")
    return torch.Tensor.__setitem__(a, index, value)


def _called_from(functions, depth: int) -> bool:
    """Whether a caller within ``depth`` frames above the handler is one of ``functions``
    of torch's own modules (torch's attention code, whose mask arithmetic means
    masking; a user's function of the same name is not it)."""
    functions = (functions,) if isinstance(functions, str) else functions
    f = sys._getframe(2)
    for _ in range(depth):
        if f is None:
            return False
        if f.f_code.co_name in functions and \
                str(f.f_globals.get("__name__", "")).startswith("torch."):
            return True
        f = f.f_back
    return False


def _added_product(name, product, inp, m1, m2, beta, alpha):
    """``beta * inp + alpha * product(m1, m2)``; in float32 where it is a half type and
    anything is added or scaled (_rounded_once)."""
    if (beta == 0 and alpha == 1) or not all(isinstance(t, torch.Tensor)
                                             for t in (inp, m1, m2)):
        return _added(name, inp, product(m1, m2), beta, alpha)
    return _rounded_once(lambda i, a, b: _added(name, i, product(a, b), beta, alpha),
                         inp, m1, m2)


@_register(torch.sparse.addmm)
def _sparse_addmm(mat, mat1, mat2, *, beta=1, alpha=1):
    return _addmm(mat, mat1, mat2, beta=beta, alpha=alpha)


@_register(torch.sparse.sampled_addmm)
def _sampled_addmm(inp, mat1, mat2, *, beta=1, alpha=1, out=None):
    """alpha * (mat1 @ mat2) at inp's stored entries + beta * inp: one SDDMM over inp's
    pattern (its values replaced by ones, as torch's spy(input)), inp's format kept; of
    a batch (b, m, n) with batches of mat1 and mat2 too, as torch's."""
    name = "torch.sparse.sampled_addmm"
    refuse_out(name, out, inp, mat1, mat2)
    if not _is_sparse(inp) or _is_sparse(mat1) or _is_sparse(mat2):
        refuse(name, inp, mat1, mat2, why="input must be the SparseTensor, mat1 and mat2 "
                                          "dense")
    n = inp.dim()
    if n not in (2, 3) or (mat1.dim(), mat2.dim()) != (n, n) or \
            (*mat1.shape[:-1], mat2.shape[-1], mat1.shape[-1]) != \
            (*inp.shape, mat2.shape[-2]) or mat2.shape[:-2] != inp.shape[:-2]:
        raise RuntimeError(f"{name}: expected input (m, n), mat1 (m, k) and mat2 (k, n), or "
                           f"a batch of each (b, m, n), (b, m, k) and (b, k, n), got "
                           f"{tuple(inp.shape)}, {tuple(mat1.shape)} and {tuple(mat2.shape)}")
    dt = _promoted(inp, mat1, mat2)
    alpha, beta = add_product_scalars(dt, alpha, beta)
    if (alpha != 1 or beta != 0) and dt in _HALF:
        return _rounded_once(lambda i, a, b: _sampled_addmm(i, a, b, beta=beta, alpha=alpha),
                             inp, mat1, mat2, dt=dt)
    inp = _coalesced(inp)     # (spy has one 1 per coordinate)
    expr = "ij,ik,kj->ij" if n == 2 else "bij,bik,bkj->bij"
    vals = sampled_at(inp, inp.dtype, lambda spy: einsum(expr, spy, mat1, mat2))
    if alpha != 1:
        vals = vals * alpha
    if beta != 0:
        vals = vals + (inp._vals if beta == 1 else inp._vals * beta)
    return inp._rewrap(vals, requires_grad=vals.requires_grad)


@_register(F.linear)
def _linear(inp, weight, bias=None):
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or inp.dim() < 1:
        refuse("F.linear", inp, weight, why="weight must be 2-D and input at least 1-D")
    if inp.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"F.linear: the input's last dimension ({inp.shape[-1]}) is not "
                           f"the weight's in_features ({weight.shape[1]})")
    if isinstance(bias, torch.Tensor) and not _is_sparse(bias):
        dt = _promoted(inp, weight, bias)
        if dt in _HALF:   # (the bias added before rounding)
            return _rounded_once(_linear, inp, weight, bias, dt=dt)
    if _is_sparse(weight) and not _is_sparse(inp) and inp.dim() >= 2 and \
            inp.numel() >= _LINEAR_SPMM_MIN_BATCH * inp.shape[-1] and \
            weight.nnz * (inp.numel() // max(inp.shape[-1], 1)) >= _LINEAR_SPMM_MIN_WORK:
        # y = x W^T computed as (W x^T)^T: an SpMM over W's rows whose dense operand is
        # contiguous along the batch, so the kernel runs in register tiles of the batch
        # (one SpMV per batch row otherwise).  The result is made contiguous, as
        # nn.Linear's is (`y.view(n, -1)` follows linear layers), in the pass that adds
        # the bias where there is one.
        lead = inp.shape[:-1]
        xt = inp.reshape(-1, inp.shape[-1]).t().contiguous()
        y = _contract("kj,jb->kb", (weight, xt)).t()
        if isinstance(bias, torch.Tensor) and not _is_sparse(bias) and \
                (bias.dim() <= 1 or len(lead) == 1):
            y, bias = _plus_bias(y, bias), None
        else:
            y = y.contiguous()
        if len(lead) != 1:
            y = y.reshape(*lead, weight.shape[0])
    else:
        y = _contract(_linear_expr(inp.dim()), (inp, weight))
    if bias is None:
        return y
    if _is_sparse(bias):
        refuse("F.linear", inp, weight, bias, why="a sparse bias")
    if _is_sparse(y):
        return _add("F.linear", y, bias.expand(y.shape) if bias.shape != y.shape else bias)
    return y + bias


def _plus_bias(y, bias):
    """y + bias, contiguous whatever y's strides (a transposed view): one pass where
    nothing is recorded (torch's add writes the layout of its input otherwise)."""
    if torch.is_grad_enabled() and (y.requires_grad or bias.requires_grad):
        return y.contiguous() + bias
    out = torch.empty(y.shape, dtype=torch.result_type(y, bias))
    return torch.add(y, bias, out=out)


# F.linear with a sparse weight runs as an SpMM on x^T from this many batch rows and this
# many multiply-adds (below, the copy of x and the extra views cost more than they save)
_LINEAR_SPMM_MIN_BATCH = 16
_LINEAR_SPMM_MIN_WORK = 1 << 17


@functools.lru_cache(maxsize=None)
def _linear_expr(ndim):
    batch = _LETTERS[:ndim - 1]
    return f"{batch}j,kj->{batch}k"


# ---- reductions ---------------------------------------------------------------------------

def _norm_dims(dim, n):
    if dim is None:
        return list(range(n))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return list(range(n))
    out = []
    for d in dims:
        if not -n <= d < n:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-n}, {n - 1}], but got {d})")
        if d % n in out:
            raise RuntimeError(f"dim {d % n} appears multiple times in the list of dims")
        out.append(d % n)
    return sorted(out)


def _sum(a, dim=None, keepdim=False, *, dtype=None, sparse=False):
    """A.sum: dense results; ``sparse`` (torch.sparse.sum, no keepdim): where dimensions
    remain, a csf SparseTensor storing the kept coordinates some stored entry has, as
    torch's sparse sum does (a place whose entries sum to 0 stays stored; integers keep
    their dtype there, as torch's do)."""
    n = a.dim()
    dims = _norm_dims(dim, n)
    if (dtype is None and not a.dtype.is_floating_point and a.dtype is not torch.int64 and
            not (sparse and len(dims) < n)):
        dtype = torch.int64   # (torch sums integers in int64)
    src = a if dtype is None else _summed_as(a, dtype)
    if len(dims) == n:
        r = src._vals.sum(dtype=src.dtype)   # (an int8 sum asked in int8 stays int8)
        return r.reshape([1] * n) if keepdim else r
    ix = "ijklmnpq"[:n]
    kept = "".join(c for d, c in enumerate(ix) if d not in dims)
    r = einsum(f"{ix}->{kept}", src, out_format="csf" if sparse else "dense")
    if _is_sparse(r) and not sparse:
        r = r.to_dense()
    if r.dtype is not src.dtype:   # (an integer sum asked in int32 or narrower: einsum
        # summed it in int64, the same modulo the narrower width)
        r = _map_values(r, lambda v: v.to(src.dtype)) if sparse else r.to(src.dtype)
    if keepdim:
        r = r.reshape([1 if d in dims else a.shape[d] for d in range(n)])
    return r


@_register(torch.sum, torch.Tensor.sum)
def _sum_handler(a, dim=None, keepdim=False, *, dtype=None, out=None):
    refuse_out("torch.sum", out, a)
    return _sum(a, dim, keepdim, dtype=dtype)


@_register(torch._sparse_sum)   # torch.sparse.sum: sparse where dimensions remain
def _sparse_sum_handler(a, dim=None, *, dtype=None):
    return _sum(a, dim, False, dtype=dtype, sparse=True)


@_register(torch.mean, torch.Tensor.mean)
def _mean_handler(a, dim=None, keepdim=False, *, dtype=None, out=None):
    refuse_out("torch.mean", out, a)
    _float_input("mean", a, dtype)
    dims = _norm_dims(dim, a.dim())
    count = math.prod(a.shape[d] for d in dims)
    out = dtype or a.dtype   # (half types: summed and divided in float32, rounded once)
    return (_sum(a, dim, keepdim, dtype=compute_dtype(out)) / count).to(out)


# ---- reductions where the implicit zeros count: amax/amin, max/min, norms, count_nonzero ---

def _coalesced(a: SparseTensor) -> SparseTensor:
    return _coalesce(a) if has_duplicates(a) else a


def _summed_as(a: SparseTensor, dtype) -> SparseTensor:
    """a with its values as ``dtype`` for a sum in that dtype: repeated coordinates are
    summed in a's own dtype first (wrapping, as torch's coalesce does), then converted."""
    return _map_values(_coalesced(a), lambda v: v.to(dtype))


def _extreme(name, a: SparseTensor, dim, keepdim, largest):
    """amax / amin over dims (all by default): a dense result whose places with fewer
    stored entries than their group size also see the zeros not stored."""
    a = _coalesced(a)
    n = a.dim()
    dims = _norm_dims(dim, n)
    group = math.prod(a.shape[d] for d in dims)
    if group == 0:
        raise IndexError(f"{name}(): reducing over an empty dimension, which has no "
                         f"identity")
    others = [d for d in range(n) if d not in dims]
    coords = dim_coords(a)
    key = _linear_key([coords[d] for d in others], [a.shape[d] for d in others], a.nnz)
    m = math.prod(a.shape[d] for d in others)
    v = a._vals
    if v.dtype.is_floating_point:
        start = torch.full((m,), -math.inf if largest else math.inf, dtype=v.dtype)
    else:
        info = torch.iinfo(v.dtype)
        start = torch.full((m,), info.min if largest else info.max, dtype=v.dtype)
    r = start.scatter_reduce(0, key, v, "amax" if largest else "amin", include_self=True)
    count = torch.zeros(m, dtype=torch.int64).index_add_(0, key, torch.ones_like(key))
    with_zero = r.clamp_min(0) if largest else r.clamp_max(0)
    if v.requires_grad:
        # Stored zeros that are the extreme tie with the group's zeros not stored: as dense
        # amax, the gradient is shared among all of them, so the stored ones get their share.
        ties = torch.zeros(m, dtype=v.dtype).index_add_(0, key, (v == 0).to(v.dtype))
        unstored = (group - count).to(v.dtype)
        with_zero = with_zero * torch.where((r == 0) & (ties > 0), ties / (ties + unstored),
                                            1.0)
    r = torch.where(count < group, with_zero, r)
    shape = [1 if d in dims else a.shape[d] for d in range(n)] if keepdim else \
        [a.shape[d] for d in others]
    return r.reshape(shape)


@_register(torch.amax, torch.Tensor.amax)
def _amax(a, dim=(), keepdim=False, *, out=None):
    refuse_out("torch.amax", out, a)
    return _extreme("amax", a, dim, keepdim, True)


@_register(torch.amin, torch.Tensor.amin)
def _amin(a, dim=(), keepdim=False, *, out=None):
    refuse_out("torch.amin", out, a)
    return _extreme("amin", a, dim, keepdim, False)


def _max_min(name, largest):
    def handler(a, *args, **kwargs):
        if args and isinstance(args[0], torch.Tensor) or "other" in kwargs:
            refuse(f"torch.{name}(A, B)", a, *args, why=f"the elementwise {name}imum of "
                   f"two tensors is not built (torch.a{name}(A, dim) reduces one)")
        if args or kwargs:
            refuse(f"torch.{name} with arguments", a, *args,
                   why=f"the reduction over a dimension returns indices too; use "
                       f"torch.a{name}(A, dim)")
        return _extreme(name, a, None, False, largest)
    return handler


_register(torch.max, torch.Tensor.max)(_max_min("max", True))
_register(torch.min, torch.Tensor.min)(_max_min("min", False))


def _float_input(name, a, dtype):
    """torch's reductions with a floating result refuse what torch's do: ``mean`` an
    integer ``dtype=``, or an integer input without one; a norm an integer input, an
    integer ``dtype=`` or one narrower than the input's."""
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError(f"{name}(): dtype= must be a floating point dtype, got {dtype}")
    if name == "mean" and dtype is not None:
        return
    if not a.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): expected a floating point input, got {a.dtype} "
                           f"(convert with .float()" +
                           (" or pass dtype=)" if name == "mean" else ")"))
    if dtype is not None and torch.promote_types(a.dtype, dtype) != dtype:
        raise RuntimeError(f"{name}(): the input's dtype {a.dtype} does not convert to "
                           f"dtype={dtype} without narrowing")


def _vector_norm(name, a, ord, dim, keepdim, dtype):
    if not _is_sparse(a):
        refuse(name, a, why="the input must be the SparseTensor")
    _float_input(name, a, dtype)
    a = _coalesced(a)
    if dtype is not None:
        a = _map_values(a, lambda v: v.to(dtype))
    ord = float(ord)
    if ord == math.inf:
        return _extreme(name, _map_values(a, torch.abs), dim, keepdim, True)
    if ord == -math.inf:
        return _extreme(name, _map_values(a, torch.abs), dim, keepdim, False)
    if ord == 0:   # (+ 0 * v, finite: the count takes part in autograd, as torch's does)
        return _sum(_map_values(a, lambda v: (v != 0).to(v.dtype) + (v * 0).nan_to_num(
            0.0, 0.0, 0.0)), dim, keepdim)
    if ord < 0:
        refuse(f"{name}(ord={ord:g})", a, why="a negative order is not built")
    if len(_norm_dims(dim, a.dim())) == a.dim():   # every dimension: the values' norm
        r = torch.linalg.vector_norm(a._vals, ord)
        return r.reshape([1] * a.dim()) if keepdim else r
    work = compute_dtype(a.dtype)   # (half types: powers, sum and root in float32)

    def powered(v):   # |v| ** ord, with gradient 0 at 0 for every ord (0 < ord < 1 too)
        v, stored = v.to(work), v != 0
        return torch.where(stored, torch.where(stored, v, 1).abs() ** ord, 0)
    s = _sum(_map_values(a, powered), dim, keepdim)
    nonzero = s != 0     # (a zero sum's root has no gradient: 0 there, as torch's norm;
    #                       a NaN sum stays NaN)
    return torch.where(nonzero, torch.where(nonzero, s, 1) ** (1 / ord), 0).to(a.dtype)


@_register(torch.linalg.vector_norm)
def _vector_norm_handler(a, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    refuse_out("torch.linalg.vector_norm", out, a)
    return _vector_norm("torch.linalg.vector_norm", a, ord, dim, keepdim, dtype)


@_register(torch.norm, torch.Tensor.norm)
def _norm_handler(a, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    refuse_out("torch.norm", out, a)
    if isinstance(p, str):
        if p != "fro":
            refuse(f"torch.norm(p={p!r})", a, why="matrix norms other than 'fro' are not "
                                                 "built")
        p = 2
    return _vector_norm("torch.norm", a, p, dim, keepdim, dtype)


def _frobenius(name, a, ord, dim, keepdim, out, dtype):
    refuse_out(name, out, a)
    if ord not in (None, "fro"):
        refuse(f"{name}(ord={ord!r})", a, why="only the Frobenius (2-) norm over the "
                                              "entries is built")
    return _vector_norm(name, a, 2, dim, keepdim, dtype)


@_register(torch.linalg.norm)
def _linalg_norm(a, ord=None, dim=None, keepdim=False, *, out=None, dtype=None):
    # (an int dim, or a 1-D input, makes it a vector norm of that order, as torch's)
    if ord is not None and not isinstance(ord, str) and (
            isinstance(dim, int) or dim is None and a.dim() == 1):
        refuse_out("torch.linalg.norm", out, a)
        return _vector_norm("torch.linalg.norm", a, ord, dim, keepdim, dtype)
    return _frobenius("torch.linalg.norm", a, ord, dim, keepdim, out, dtype)


@_register(torch.linalg.matrix_norm)
def _matrix_norm(a, ord="fro", dim=(-2, -1), keepdim=False, *, out=None, dtype=None):
    return _frobenius("torch.linalg.matrix_norm", a, ord, dim, keepdim, out, dtype)


@_register(F.normalize)
def _normalize(a, p=2.0, dim=1, eps=1e-12, out=None):
    """A / max(||A||_p over dim, eps): each stored value divided by its slice's norm."""
    refuse_out("F.normalize", out, a)
    if not _is_sparse(a):
        refuse("F.normalize", a, why="the input must be the SparseTensor")
    if p == "fro":   # (torch's normalize takes it: the 2-norm of each slice)
        p = 2.0
    return _div_handler(a, _vector_norm("F.normalize", a, p, dim, True, None).clamp_min(eps))


@_register(torch.count_nonzero, torch.Tensor.count_nonzero)
def _count_nonzero(a, dim=None):
    if not _is_sparse(a):
        refuse("torch.count_nonzero", a, why="the input must be the SparseTensor")
    return _sum(_map_values(_coalesced(a), lambda v: (v != 0).to(torch.int64)), dim)


# ---- softmax over stored entries ---------------------------------------------------------

def _softmax(name, a, dim, dtype, log):
    if not _is_sparse(a):
        refuse(name, a, why="the input must be the SparseTensor")
    n = a.dim()
    if dim is None:   # (F.softmax's implicit dim, deprecated: torch's choice and warning)
        dim = 0 if n in (0, 1, 3) else 1
        warnings.warn(f"Implicit dimension choice for {name.split('.')[-1]} has been "
                      f"deprecated. Change the call to include dim=X as an argument.",
                      stacklevel=4)
    dim = _dim_index(name, dim, n)
    if not (a._vals.dtype if dtype is None else dtype).is_floating_point:
        refuse(name, a, why=f"softmax of {a._vals.dtype if dtype is None else dtype} "
                            "values (convert with .float() or pass dtype=)")
    a = _coalesced(a)   # (duplicates are summed first, as torch.sparse.softmax does)
    v = a._vals if dtype is None else a._vals.to(dtype)
    out_dtype = v.dtype
    v = v.to(compute_dtype(out_dtype))   # (half dtypes: in float32, rounded once)
    offsets = _innermost_segments(a, dim)
    if offsets is not None:
        # (the maxima only shift: segment_reduce, twice as fast as scatter_reduce; the
        # sums by index_add, which autograd differentiates twice, unlike segment_reduce)
        lengths = offsets[1:] - offsets[:-1]
        vmax = torch.segment_reduce(v.detach(), "max", offsets=offsets, unsafe=True)
        shifted = v - repeated(vmax, lengths)
        e = shifted.exp()
        out = None if log else _scaled_by_segment_sums(a, e)
        if out is None:
            key = repeated(torch.arange(lengths.numel()), lengths)
            s = torch.zeros(lengths.numel(), dtype=e.dtype).index_add(0, key, e)
            out = (shifted - repeated(s.log(), lengths) if log else e / repeated(s, lengths))
        out = out.to(out_dtype)
        return a._rewrap(out, requires_grad=out.requires_grad)
    coords = dim_coords(a)
    others = [d for d in range(n) if d != dim]
    m = math.prod(a.shape[d] for d in others)
    key = _linear_key([coords[d] for d in others], [a.shape[d] for d in others], a.nnz)
    if v.numel() == 0:
        v = v.to(out_dtype)
        return a._rewrap(v, requires_grad=v.requires_grad)
    if m > 2 * a.nnz:   # (hypersparse: the slices that hold entries, not every slice)
        slices, key = torch.unique(key, return_inverse=True)
        m = slices.numel()
    vmax = torch.full((m,), -math.inf, dtype=v.dtype).scatter_reduce(
        0, key, v.detach(), "amax", include_self=True)
    shifted = v - vmax[key]
    e = shifted.exp()
    s = torch.zeros(m, dtype=v.dtype).index_add(0, key, e)
    out = (shifted - s.log()[key] if log else e / s[key]).to(out_dtype)
    return a._rewrap(out, requires_grad=out.requires_grad)


def _scaled_by_segment_sums(a: SparseTensor, e: torch.Tensor):
    """e (values on a's entries) divided by the sum over each segment of a's innermost
    level, by two compiled kernels (the sums, then the scaling), where every level above
    is dense: its segments are then the dense result's elements, in level order.  None
    where a level above is not dense (a dcsr's rows: the dense sums would be over every
    possible row) or the scaling's result does not share a's pattern arrays."""
    fmt, n = a._format, a.dim()
    if n < 2 or any(k != 0 for k in fmt.kinds[:-1]):
        return None
    ix = "abcdefgh"[:n]
    par = "".join(ix[d] for d in fmt.order[:-1])
    E = a._rewrap(e, requires_grad=e.requires_grad)
    s = einsum(f"{ix}->{par}", E)
    r = einsum(f"{ix},{par}->{ix}", E, 1 / (s + (s == 0)))   # (a segment of none: 1)
    if not _is_sparse(r) or not _same_arrays(r, a, compare=False):
        return None
    return r._vals


def _innermost_segments(a: SparseTensor, dim: int):
    """Where the slices along ``dim`` are the segments of the innermost level (a unique
    compressed level storing ``dim`` below unique ones: a csr's rows, a csc's columns,
    the heads' rows of a ddc), its positions from 0 (int64); else None.  A segment's
    entries are contiguous, so reductions over them need no per-entry slice keys."""
    fmt = a._format
    last = len(fmt.kinds) - 1
    if (a.dim() < 1 or fmt.order[last] != dim or fmt.kinds[last] != 1
            or not all(fmt.unique)):
        return None
    pos = a._pos[last].to(torch.int64)
    if int(pos[-1]) - int(pos[0]) != a.nnz:
        return None
    return pos - pos[0]


@_register(torch.softmax, torch.Tensor.softmax, F.softmax, torch.sparse.softmax)
def _softmax_handler(a, dim=None, dtype=None, _stacklevel=None):
    return _softmax("torch.softmax", a, dim, dtype, log=False)


@_register(torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax,
           torch.sparse.log_softmax)
def _log_softmax_handler(a, dim=None, dtype=None, _stacklevel=None):
    return _softmax("torch.log_softmax", a, dim, dtype, log=True)


# ---- attention with a sparse mask ----------------------------------------------------------

def _units_dropped(a: SparseTensor, dims) -> SparseTensor:
    """a without its dimensions ``dims`` (each of size 1), storing exactly its stored
    places: a select where they are dense levels above every sparse one (the levels
    below stay as they are), else a reshape (a squeeze of a dimension a sparse level
    stores, or of a dense one below it, keeps dense levels that would store every place
    of their rows)."""
    fmt = a._format
    first = next((k for k, x in enumerate(fmt.kinds) if x != 0), len(fmt.kinds))
    if len(dims) == a.dim() or all(fmt.order.index(d) < first for d in dims):
        out = a   # (every dim dropped: the 0-D value, as a plain tensor)
        for d in sorted(dims, reverse=True):
            out = select(out, d, 0)
        return out
    return _reshape("squeeze", a, [x for d, x in enumerate(a.shape) if d not in dims])


def _masked_scores(M, ms, q, qs, k, ks, out, sizes, scale, shifts_cancel=False):
    """Attention scores over a sparse mask: ``scale`` times the products of q and k at
    M's stored entries (one SDDMM, M's pattern holding ``scale``) plus M's values, over
    the batch letters ``out`` (``sizes``: their extents) and then i, j: a SparseTensor
    with M's pattern in each slice.  The values are not added where ``shifts_cancel``
    (a softmax follows) and they are one finite value that does not require grad."""
    pattern = M._rewrap(torch.full_like(M._vals, scale, requires_grad=False))
    s = _all_dense_wrapped(einsum(f"{ms},{qs},{ks}->{out}ij", pattern, q, k), M.index_dtype)
    mv = M._vals
    if shifts_cancel and not M.requires_grad and (
            not mv.numel() or bool(mv.isfinite().all()) and bool((mv == mv[0]).all())):
        return s
    extra = "".join(c for c in out if c not in ms)
    if extra:
        ones = torch.ones([sizes[c] for c in extra], dtype=mv.dtype)
        M = _all_dense_wrapped(einsum(f"{ms},{extra}->{out}ij", M, ones), M.index_dtype)
    return _add("torch.add", s, M)


def _mha_weights_scores(m: SparseTensor, b1, b2, beta, alpha):
    """nn.MultiheadAttention's ``baddbmm(attn_mask, q_scaled, k.mT)`` (its path that
    returns the attention weights) for a sparse attn_mask m: the scores at m's stored
    entries plus m's values, as SDPA's (unstored places unattended; the tensor sum would
    attend them)."""
    name = "nn.MultiheadAttention"
    if _is_sparse(b1) or _is_sparse(b2) or m.dim() != 3 or b1.dim() != 3 or b2.dim() != 3 \
            or tuple(m.shape[1:]) != (b1.shape[1], b2.shape[2]) \
            or m.shape[0] not in (1, b1.shape[0]):
        refuse(name, m, b1, b2, why=f"an attn_mask of shape {tuple(m.shape)} with scores of "
                                    f"({b1.shape[0]}, {b1.shape[1]}, {b2.shape[-1]})")
    m = _coalesced(m)
    if m._vals.dtype != b1.dtype:
        m = _map_values(m, lambda x: x.to(b1.dtype))
    if beta != 1:
        m = _mul(m, beta)
    ms = "bij"
    if m.shape[0] == 1 and b1.shape[0] != 1:
        m, ms = _squeeze(m, 0), "ij"
    return _masked_scores(m, ms, b1, "bik", b2, "bkj", "b", {"b": b1.shape[0]}, alpha)


def _body_of(func):
    """A copy of a torch Python function whose own ``has_torch_function*`` checks answer
    False, so that its body runs when called: scorch's handlers then take the ops inside
    it (its ``F.linear`` of a sparse weight, the weight's ``split``) as they take a user's
    (torch's default for a subclass runs the function with them off, and its inner ops
    reached aten, where they are refused)."""
    g = dict(func.__globals__)
    for name in ("has_torch_function", "has_torch_function_unary",
                 "has_torch_function_variadic"):
        g[name] = lambda *args: False
    body = type(func)(func.__code__, g, func.__name__, func.__defaults__, func.__closure__)
    body.__kwdefaults__ = func.__kwdefaults__
    return body


_MHA_BODY = _body_of(F.multi_head_attention_forward)


@_register(F.multi_head_attention_forward)
def _mha_forward(*args, **kwargs):
    """nn.MultiheadAttention (and the Transformer layers built on it) with sparse
    projection weights (a pruned in_proj_weight / out_proj_weight, or separate q, k, v
    weights): torch's own function, its projections reaching scorch's F.linear."""
    with torch._C._EnableTorchFunction():
        return _MHA_BODY(*args, **kwargs)


@_register(F.scaled_dot_product_attention)
def _sdpa_handler(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                  scale=None, enable_gqa=False):
    """Attention over a SparseTensor mask's stored positions: the scores there are an SDDMM
    (``scale * q·k``) plus the mask's stored value, as a float mask is added; the positions
    not stored take no part (a dense float mask's -inf, a bool mask's False).  A row with
    none attended gives 0, as torch's does.  The n x n scores are never formed."""
    name = "F.scaled_dot_product_attention"
    M = attn_mask
    if not _is_sparse(M) or any(_is_sparse(t) for t in (query, key, value)):
        refuse(name, query, key, value, M, why="only attn_mask may be a SparseTensor")
    q, k, v = query, key, value
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise TypeError(f"{name}: query, key and value must be tensors")
    if is_causal:
        raise RuntimeError(f"{name}: an explicit attn_mask should not be set when "
                           f"is_causal=True (a causal sparse mask: attn_mask.tril())")
    if min(q.dim(), k.dim(), v.dim()) < 2 or k.shape[-1] != q.shape[-1] \
            or v.shape[-2] != k.shape[-2]:
        raise RuntimeError(f"{name}: query (..., L, E), key (..., S, E) and value "
                           f"(..., S, Ev) expected; got {tuple(q.shape)}, {tuple(k.shape)} "
                           f"and {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        raise RuntimeError(f"{name}: query, key and value must have one floating dtype; "
                           f"got {q.dtype}, {k.dtype} and {v.dtype}")
    if not M._vals.dtype.is_floating_point:
        raise RuntimeError(f"{name}: a sparse attn_mask's values must be floating (added to "
                           f"the scores), not {M._vals.dtype}")
    if M.nnz and bool(torch.isneginf(M._vals.detach()).all()):
        warnings.warn(f"{name}: every stored value of the sparse attn_mask is -inf, so no "
                      f"place is attended and the output is 0: a sparse mask attends its "
                      f"stored places (torch's additive float mask stores -inf where "
                      f"attention is blocked; build the sparse mask from the allowed places)",
                      UserWarning, stacklevel=3)
    L, S = q.shape[-2], k.shape[-2]
    if M.dim() < 2 or tuple(M.shape[-2:]) != (L, S):
        raise RuntimeError(f"{name}: a sparse attn_mask must end in (L, S) = ({L}, {S}); "
                           f"got shape {tuple(M.shape)}")
    if enable_gqa and q.dim() >= 3 and k.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk or v.dim() < 3 or v.shape[-3] != hk:
            raise RuntimeError(f"{name}: enable_gqa needs the query's {hq} heads to be a "
                               f"multiple of the key's and value's ({hk})")
        k, v = k.repeat_interleave(hq // hk, -3), v.repeat_interleave(hq // hk, -3)
    shapes = [tuple(t.shape[:-2]) for t in (M, q, k, v)]
    try:
        batch = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise RuntimeError(f"{name}: the batch dims (before L and S) of the sparse attn_mask "
                           f"{shapes[0]}, the query {shapes[1]}, key {shapes[2]} and value "
                           f"{shapes[3]} do not broadcast together") from None
    if len(batch) > 8:
        refuse(name, M, why=f"{len(batch)} batch dimensions (at most 8)")
    letters = _LETTERS[:len(batch)]

    def own(t, sub):   # t without its size-1 batch dims, and its subscript
        nb = t.dim() - 2
        keep = [d for d in range(nb) if t.shape[d] != 1]
        if len(keep) < nb:
            units = [d for d in range(nb) if d not in keep]
            t = _units_dropped(t, units) if _is_sparse(t) else t.squeeze(units)
        return t, "".join(letters[len(batch) - nb + d] for d in keep) + sub

    if M._vals.dtype != q.dtype:   # (a float32 mask with a bfloat16 query, as torch's)
        M = _map_values(M, lambda x: x.to(q.dtype))
    M, ms = own(_coalesced(M), "ij")
    q, qs = own(q, "ik")
    k, ks = own(k, "jk")
    v, vs = own(v, "jz")
    scores = "".join(c for c in letters if c in ms + qs + ks)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = _masked_scores(M, ms, q, qs, k, ks, scores,
                       {c: batch[letters.index(c)] for c in scores}, scale, True)
    neg = torch.isneginf(s._vals) if bool(torch.isneginf(M._vals).any()) else None
    if neg is not None:   # (-inf scores as the dtype's lowest: a row of only those has a
        sv = torch.where(neg, torch.finfo(s.dtype).min, s._vals)   # finite maximum, so
        s = s._rewrap(sv, requires_grad=sv.requires_grad)   # no -inf - -inf: nan gradients)
    p = _softmax(name, s, -1, None, log=False)
    if neg is not None:   # (and their weights 0: a row all -inf gives 0, as torch's)
        w = torch.where(neg, 0, p._vals)
        p = p._rewrap(w, requires_grad=w.requires_grad)
    if dropout_p > 0:
        p = _dropout(p, dropout_p)
    out = "".join(c for c in letters if c in scores + vs)
    r = einsum(f"{scores}ij,{vs}->{out}iz", p, v)
    return r.reshape(*batch, L, r.shape[-1])


def _item(kind):
    """The one element of a one-element tensor (its stored values summed, 0 if none), as
    the Python number torch gives (item) or the one asked for (bool, float, int)."""
    def handler(a):
        if a.numel() != 1:
            if kind is bool:
                raise RuntimeError("Boolean value of Tensor with no values is ambiguous"
                                   if a.numel() == 0 else
                                   f"Boolean value of Tensor with more than one value is "
                                   f"ambiguous ({a.numel()} elements)")
            raise RuntimeError(f"a Tensor with {a.numel()} elements cannot be converted to "
                               f"Scalar")
        return kind(a._vals.detach().sum(dtype=a.dtype).item())
    return handler


for _f, _kind in ((torch.Tensor.item, lambda x: x), (torch.Tensor.__bool__, bool),
                  (torch.Tensor.__float__, float), (torch.Tensor.__int__, int),
                  (torch.Tensor.is_nonzero, bool), (torch.is_nonzero, bool)):
    _register(_f)(_item(_kind))


# ---- structure: transpose, dtype, autograd flags ------------------------------------------

def _permuted(a: SparseTensor, perm):
    """The same arrays under a new dimension order (no copy)."""
    n = a.dim()
    perm = [_dim_index("permute", p, n) for p in perm]
    if sorted(perm) != list(range(n)):
        raise RuntimeError(f"permute: {tuple(perm)} is not a permutation of {n} dimensions")
    inv = [0] * n
    for new, old in enumerate(perm):
        inv[old] = new
    f = a._format
    fmt = _format_from_tuple(f.kinds, f.unique, tuple(inv[d] for d in f.order))
    return SparseTensor([a.shape[p] for p in perm], fmt, a._pos, a._crd, a._vals,
                        requires_grad=a._vals.requires_grad, index_dtype=a.index_dtype,
                        checked=True, versions=a._iv)


@_register(torch.permute, torch.Tensor.permute)
def _permute(a, *args, dims=None):
    dims = args if dims is None else (dims,)    # (A.permute(1, 0), permute(dims=(1, 0)))
    if len(dims) == 1 and isinstance(dims[0], (list, tuple, torch.Size)):
        dims = tuple(dims[0])
    return _permuted(a, dims)


@_register(torch.movedim, torch.Tensor.movedim, torch.moveaxis, torch.Tensor.moveaxis)
def _movedim(a, source, destination):
    """``movedim``: the dims of source to the places of destination, the others in order
    (a permute, whose view it is)."""
    n = a.dim()
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} "
                           f"dims) should contain the same number of dims as destination "
                           f"({dst} dims)")
    src = [_dim_index("movedim", d, n) for d in src]
    dst = [_dim_index("movedim", d, n) for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim in `source` or `destination`")
    perm = [None] * n
    for s_, d_ in zip(src, dst):
        perm[d_] = s_
    rest = iter(d for d in range(n) if d not in src)
    return _permuted(a, [p if p is not None else next(rest) for p in perm])


@_register(torch.transpose, torch.Tensor.transpose, torch.swapaxes, torch.Tensor.swapaxes,
           torch.swapdims, torch.Tensor.swapdims)
def _transpose(a, dim0=None, dim1=None, *, axis0=None, axis1=None):
    n = a.dim()     # (swapaxes names the dims axis0, axis1)
    d0 = _dim_index("transpose", dim0 if axis0 is None else axis0, n)
    d1 = _dim_index("transpose", dim1 if axis1 is None else axis1, n)
    perm = list(range(n))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permuted(a, perm)


@_register(torch.t, torch.Tensor.t)
def _t(a):
    if a.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{a.dim()}D")
    return _permuted(a, list(range(a.dim()))[::-1])


@_register(torch.Tensor.T.__get__)
def _T(a):
    return _permuted(a, list(range(a.dim()))[::-1])


@_register(torch.Tensor.H.__get__, torch.Tensor.mH.__get__, torch.Tensor.adjoint)
def _H(a):
    # (real values only: the conjugate transpose is the transpose)
    if a.dim() < 2:
        raise RuntimeError("the adjoint needs a tensor of 2 or more dimensions")
    return _transpose(a, -2, -1)


@_register(torch.Tensor.mT.__get__)
def _mT(a):
    if a.dim() < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of "
                           f"matrices. Got {a.dim()}-D tensor.")
    return _transpose(a, -2, -1)


# ---- selecting along a dimension: index_select, narrow, A[rows], A[a:b] -----------------

def _index_tensor(k) -> torch.Tensor:
    """An index (tensor, list, int) as a tensor; ``[]`` as an empty int64 one (it selects
    nothing, as torch's does; ``torch.as_tensor([])`` would be float32)."""
    return torch.as_tensor(k) if not isinstance(k, list) or k else \
        torch.zeros(0, dtype=torch.int64)


def index_select(a: SparseTensor, dim: int, index, name="index_select") -> SparseTensor:
    """The entries of ``a`` whose coordinate along ``dim`` is in ``index`` (1-D, repeats
    allowed; negative positions count from the end, except in index_select, which refuses
    them as torch's does), renumbered by their place in ``index``; the same format,
    differentiable w.r.t. the values.  csr's rows and csc's columns copy their segments
    (O(entries selected)); the dimension of the innermost level (csr's columns, csc's
    rows, a coo's last) is a compiled product with a 0/1 selection matrix
    (``_select_by_product``, O(nnz)); a matrix's outer compressed level (a coo's or
    dcsr's rows) goes through csr / csc and back (two conversions, O(nnz)); any other
    (a middle level), and any dimension far longer than the entries, goes through the
    coordinates of the stored entries and one conversion (O(nnz log nnz)).  (A product
    along an outer compressed level would search that level for every selected
    position.)  A ``range`` (a slice's or narrow's positions: in range, ascending) goes
    unchecked, and one of step 1 along csr's rows is one contiguous copy."""
    dim = _dim_index(name, dim, a.dim())
    size, span = a.shape[dim], None
    fmt = a._format
    if isinstance(index, range):
        if len(index) > 2 * a.nnz + 1024 and not (fmt.kinds == (0, 1) and fmt.order[0] == dim):
            return _range_of_entries(a, dim, index)
        span = (index.start, index.stop) if index.step == 1 else None
        index = torch.arange(index.start, index.stop, index.step)
    else:
        index = _index_tensor(index)
        if index.dtype == torch.uint8 and name == "indexing":
            index = index.bool()     # (torch's indexing reads a uint8 index as a mask)
        if index.dtype == torch.bool and name != "index_select":   # (index_select: none)
            if index.shape != (size,):
                raise IndexError(f"{name}: a boolean mask along dim {dim} needs {size} "
                                 f"entries, got shape {tuple(index.shape)}")
            index = index.nonzero().reshape(-1)
        ints = (torch.int32, torch.int64) + ((torch.int16, torch.int8)
                                             if name != "index_select" else ())
        if index.dim() > 1 or index.dtype not in ints:
            raise IndexError(f"{name}: the index must be a 1-D integer tensor, got "
                             f"{index.dtype} of shape {tuple(index.shape)}")
        index = index.reshape(-1).to(torch.int64)
        low = 0 if name == "index_select" else -size
        if index.numel() and (int(index.min()) < low or int(index.max()) >= size):
            raise IndexError(f"{name}: index out of range for dimension {dim} of size "
                             f"{size}")
        index = torch.where(index < 0, index + size, index)
    shape = list(a.shape)
    shape[dim] = index.numel()
    if fmt.kinds == (0, 1) and fmt.order[0] == dim:
        return _select_segments(a, index, shape, span)
    # A dimension far longer than the entries (a hypersparse dcsr's or coo's) goes through
    # the coordinates: the selection matrix and the csr detour take O(size) memory.
    hypersparse = size > 2 * (a.nnz + index.numel()) + 1024
    if fmt.order[-1] == dim and not hypersparse:
        return _select_by_product(a, dim, index)
    if a.dim() == 2 and not hypersparse:   # (outer compressed level: through csr / csc)
        outer = a.to_format(_CSR_LIKE[fmt.order], drop_zeros=False)
        return _select_segments(outer, index, shape, span).to_format(fmt, drop_zeros=False)
    coords = dim_coords(a)
    order = torch.argsort(index, stable=True)
    sidx = index[order]
    # each stored entry goes out once per place its coordinate has in index
    lo = torch.searchsorted(sidx, coords[dim])
    cnt = torch.searchsorted(sidx, coords[dim], right=True) - lo
    ent = repeated(torch.arange(a.nnz), cnt)
    first = repeated(torch.cumsum(cnt, 0) - cnt, cnt)
    cols = [c[ent] for c in coords]
    cols[dim] = order[lo[ent] + torch.arange(ent.numel()) - first]
    return _entries_of(a, shape, torch.stack(cols), a._vals[ent], a._format)


_CSR_LIKE = {(0, 1): Format.parse("csr", 2), (1, 0): Format.parse("csc", 2)}


def _range_of_entries(a: SparseTensor, dim: int, positions: range) -> SparseTensor:
    """index_select of a range far longer than the entries (a slice of a hypersparse or
    wide dimension): the entries whose coordinate the range holds, renumbered, found from
    the coordinates (O(nnz)); the range is never listed."""
    coords = dim_coords(a)
    off = coords[dim] - positions.start
    kept = ((off >= 0) & (off < len(positions) * positions.step) &
            (off % positions.step == 0)).nonzero().reshape(-1)
    cols = [c[kept] for c in coords]
    cols[dim] = off[kept] // positions.step
    shape = list(a.shape)
    shape[dim] = len(positions)
    return _entries_of(a, shape, torch.stack(cols), a._vals[kept], a._format)


def _select_by_product(a: SparseTensor, dim: int, index) -> SparseTensor:
    """index_select as a product with a 0/1 selection matrix S (S[index[k], k] = 1): for
    a matrix's columns ``A[:, index] = einsum("ij,jk->ik", A, S)``, one compiled sparse
    product in O(nnz) whatever the index's order and repeats, differentiable like any
    einsum.  Every kept entry is its value times one (explicit zeros and nan stay as
    they are); duplicates are summed, as a conversion sums them.  The result is in A's
    format."""
    n, size = index.numel(), a.shape[dim]
    order = torch.argsort(index, stable=True)
    pos = torch.zeros(size + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(index, minlength=size), 0, out=pos[1:])
    it = torch.int32 if max(size, n) <= _tensor._I32_MAX else torch.int64
    S = SparseTensor((size, n), _CSR_LIKE[(0, 1)], [None, pos.to(it)], [None, order.to(it)],
                     torch.ones(n, dtype=a.dtype), index_dtype=it, checked=True)
    letters = "ijklmnpq"[:a.dim() + 1]
    src, new = letters[:a.dim()], letters[a.dim()]
    out = src[:dim] + new + src[dim + 1:]
    expr = f"{src},{src[dim]}{new}->{out}"
    r = _kept_sparse(einsum(expr, a, S), a)   # (an all-dense format's product is dense)
    return r if r._format == a._format else r.to_format(a._format)


def _select_segments(a: SparseTensor, index, shape, span=None) -> SparseTensor:
    """index_select along the dense first level of a dense-compressed tensor (csr's rows,
    csc's columns): each selected position's segment of the compressed level, copied in
    O(entries selected) without a sort; the positions start .. stop - 1 (span) as one
    range of entries."""
    if span is not None:
        pos = a._pos[1][span[0]:span[1] + 1].to(torch.int64)
        lo, hi = int(pos[0]), int(pos[-1])
        it = a.index_dtype if hi - lo <= _tensor._I32_MAX else torch.int64
        vals = a._vals[lo:hi].clone()      # (copies, as every selection's)
        return SparseTensor(shape, a._format, [None, (pos - lo).to(it)],
                            [None, a._crd[1][lo:hi].to(it, copy=True)], vals,
                            requires_grad=vals.requires_grad, index_dtype=it, checked=True)
    pos, crd = a._pos[1].to(torch.int64), a._crd[1]
    starts = pos[index]
    cnt = pos[index + 1] - starts
    new_pos = torch.zeros(index.numel() + 1, dtype=torch.int64)
    torch.cumsum(cnt, 0, out=new_pos[1:])
    total = int(new_pos[-1])
    it = a.index_dtype if total <= _tensor._I32_MAX else torch.int64
    ent = repeated(starts - new_pos[:-1], cnt) + torch.arange(total)
    vals = a._vals[ent]
    return SparseTensor(shape, a._format, [None, new_pos.to(it)], [None, crd[ent].to(it)],
                        vals, requires_grad=vals.requires_grad, index_dtype=it, checked=True)


@_register(torch.index_select, torch.Tensor.index_select)
def _index_select(a, dim, index, *, out=None):
    refuse_out("torch.index_select", out, a, index)
    if not _is_sparse(a):
        refuse("torch.index_select", a, index, why="the input must be the SparseTensor")
    return index_select(a, dim, index)


@_register(F.embedding)
def _embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
               scale_grad_by_freq=False, sparse=False):
    """``F.embedding(idx, W)`` / nn.Embedding with a sparse weight (a pruned table, a tied
    LM head's): W's rows at idx, dense, of shape idx.shape + (embedding_dim,), its
    gradient on W's pattern (``sparse=`` changes nothing: it is sparse); rows at
    ``padding_idx`` pass no gradient, as torch's.  ``max_norm`` (which renormalises W's
    rows in place) and ``scale_grad_by_freq`` are refused."""
    name = "torch.nn.functional.embedding"
    if _is_sparse(input) or not _is_sparse(weight) or weight.dim() != 2:
        refuse(name, input, weight, why="a dense index tensor and a 2-D sparse weight")
    if max_norm is not None:
        refuse(name, input, weight, why="max_norm renormalises the weight's rows in place")
    if scale_grad_by_freq:
        refuse(name, input, weight, why="scale_grad_by_freq scales the gradient by the "
                                        "indices' counts")
    if padding_idx is not None and not -weight.shape[0] <= padding_idx < weight.shape[0]:
        raise AssertionError("Padding_idx must be within num_embeddings")
    if input.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {input.dtype} instead "
                           f"(while checking arguments for embedding)")
    flat = input.reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= weight.shape[0]):
        raise IndexError("index out of range in self")
    out = index_select(weight, 0, flat, "embedding").to_dense()
    if padding_idx is not None:
        pad = padding_idx + weight.shape[0] if padding_idx < 0 else padding_idx
        out = torch.where((flat == pad)[:, None], out.detach(), out)
    return out.reshape(*input.shape, weight.shape[1])


def _narrowed(a, dim, start, length, name):
    size = a.shape[_dim_index(name, dim, a.dim())]
    start = int(start) + (size if int(start) < 0 else 0)
    if not (0 <= start and 0 <= length and start + length <= size):
        raise IndexError(f"{name}: start {start} and length {length} exceed dimension "
                         f"{dim} of size {size}")
    return index_select(a, dim, range(start, start + length), name)


@_register(torch.narrow, torch.Tensor.narrow)
def _narrow(a, dim, start, length):
    return _piece(_narrowed(a, dim, start, length, "narrow"), a, "narrow")


@_register(torch.narrow_copy, torch.Tensor.narrow_copy)
def _narrow_copy(a, dim, start, length, *, out=None):
    """narrow_copy (what torch.sparse code calls, its COO tensors having no narrow): the
    same entries as narrow, a copy of its own (writable in place where narrow's piece is
    refused)."""
    refuse_out("torch.narrow_copy", out, a)
    return _narrowed(a, dim, start, length, "narrow_copy")


def _split_like(name, func):
    """A handler for torch's contiguous splits (split, chunk, tensor_split, h/v/dsplit):
    torch computes the pieces' sizes (and raises its errors) on a meta tensor of the
    same shape, and each piece is a narrow."""
    def handler(a, *args, **kwargs):
        if not _is_sparse(a):
            refuse(name, a, why="the input must be the SparseTensor")
        meta = torch.empty(a.shape, dtype=a.dtype, device="meta")
        pieces = func(meta, *args, **kwargs)
        dim = next((d for d in range(a.dim())
                    if any(p.shape[d] != a.shape[d] for p in pieces)), None)
        if dim is None:   # (every piece the whole tensor: one piece, or a size-0 split)
            return tuple(_narrow(a, 0, 0, a.shape[0]) if a.dim() else a for _ in pieces)
        # each piece's start from its view's offset (tensor_split's indices may go back)
        step = meta.stride(dim)
        return tuple(_narrow(a, dim, p.storage_offset() // step if step else 0, p.shape[dim])
                     for p in pieces)
    return handler


for _f, _name in ((torch.split, "split"), (torch.Tensor.split, "split"),
                  (torch.chunk, "chunk"), (torch.Tensor.chunk, "chunk"),
                  (torch.tensor_split, "tensor_split"), (torch.Tensor.tensor_split, "tensor_split"),
                  (torch.hsplit, "hsplit"), (torch.Tensor.hsplit, "hsplit"),
                  (torch.vsplit, "vsplit"), (torch.Tensor.vsplit, "vsplit"),
                  (torch.dsplit, "dsplit"), (torch.Tensor.dsplit, "dsplit")):
    _register(_f)(_split_like(f"torch.{_name}", _f))


@_register(torch.unbind, torch.Tensor.unbind)
def _unbind(a, dim=0):
    """The selections along dim (each a view of a's entries there), as torch.unbind."""
    d = _dim_index("torch.unbind", dim, a.dim())
    fmt, original = a._format, a
    if a.shape[d] > 1 and not (fmt.order[0] == d and fmt.kinds[0] == 0):
        # (each selection reads every entry but along a dense first level: one
        # conversion that puts dim d there first, so that the whole is O(nnz), not
        # O(nnz) per selection)
        rest = [k for k in fmt.order if k != d]
        a = a.to_format(Format("d" + "c" * len(rest), order=[d] + rest), drop_zeros=False)
    return tuple(_piece(select(a, d, i), original, "unbind") for i in range(a.shape[d]))


@_register(torch.Tensor.__iter__)
def _iter(a):
    if a.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(_unbind(a, 0))


_NOT_ALL_SPARSE = ("every tensor must be a SparseTensor (convert the others, dense or "
                   "torch.sparse, with scorch.to_sparse; or .to_dense() the SparseTensors "
                   "for a dense result, as nn.utils.parameters_to_vector needs)")


@_register(torch.cat, torch.concat, torch.concatenate)
def _cat(tensors, dim=0, *, axis=None, out=None):
    """Sparse tensors joined along dim (or axis, its alias) (PyG's block batching joins
    adjacencies so): the entries of each, offset along dim, storing exactly their places:
    in the first one's format where that does so (see below), else in it with its last
    level compressed; differentiable w.r.t. every values tensor."""
    dim = dim if axis is None else axis
    tensors = list(tensors)
    name = "torch.cat"
    refuse_out(name, out, *tensors)
    if not tensors or not all(_is_sparse(t) for t in tensors):
        refuse(name, *tensors, why=_NOT_ALL_SPARSE)
    first = tensors[0]
    n = first.dim()
    dim = _dim_index(name, dim, n)
    for t in tensors[1:]:
        if t.dim() != n or any(t.shape[d] != first.shape[d] for d in range(n) if d != dim):
            raise RuntimeError(f"{name}: shapes {tuple(first.shape)} and {tuple(t.shape)} "
                               f"differ outside dim {dim}")
    cols, offset = [], 0
    for t in tensors:
        c = t.indices()          # (a new tensor)
        c[dim] += offset
        offset += t.shape[dim]
        cols.append(c)
    shape = list(first.shape)
    shape[dim] = offset
    wide = any(t.index_dtype == torch.int64 for t in tensors)
    dtype = _promoted(*tensors)
    from ._convert import _from_coords

    # (the first one's format where that stores exactly the operands' places: all of
    # them all-dense, or all in it, joined along a dimension whose level is not below its
    # deepest sparse one, so that each stored dense block is one operand's; else its
    # last level compressed, as dense levels would pad the others' entries into rows)
    fmt = first._format
    sparse_levels = [k for k, kind in enumerate(fmt.kinds) if kind != 0]
    same = all(t._format == fmt for t in tensors)
    if not (same and (not sparse_levels or fmt.order.index(dim) <= sparse_levels[-1])):
        fmt = _compressed_last(fmt)
    return _from_coords(shape, torch.cat(cols, 1), torch.cat([t._vals.to(dtype)
                                                              for t in tensors]),
                        fmt, torch.int64 if wide else None)


def select(a: SparseTensor, dim: int, i: int):
    """``a`` at position i of dim, that dimension dropped: a SparseTensor whose levels are
    a's others, storing exactly a's places at i (_format_of_dims), or for a 1-D ``a`` the
    0-D value; differentiable."""
    n = a.dim()
    dim = _dim_index("select", dim, n)
    size = a.shape[dim]
    if not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
    i %= size
    fmt = a._format
    if fmt.kinds == (0, 1) and fmt.order[0] == dim:     # a csr row, a csc column
        r = _select_segments(a, None, [1, 1], (i, i + 1))
        # (the level keeps its uniqueness: a nonunique one may repeat a coordinate)
        return SparseTensor((a.shape[1 - dim],), _format_from_tuple((1,), fmt.unique[1:], (0,)),
                            [r._pos[1]], [r._crd[1]],
                            r._vals, requires_grad=r._vals.requires_grad,
                            index_dtype=r.index_dtype, checked=True)
    coords = dim_coords(a)
    keep = coords[dim] == i
    vals = a._vals[keep]
    if n == 1:   # (torch's sum of int32 values would be int64)
        return vals.sum(dtype=vals.dtype)
    dims = [d for d in range(n) if d != dim]
    kept = _format_of_dims(fmt, dims, {fmt.order[k] for k in range(n) if fmt.kinds[k] != 0})
    cols = torch.stack([c[keep] for d, c in enumerate(coords) if d != dim])
    return _entries_of(a, [a.shape[d] for d in dims], cols, vals, kept)


@_register(torch.unsqueeze, torch.Tensor.unsqueeze)
def _unsqueeze(a, dim):
    """A new dimension of size 1: a dense level of one position on top of a's levels,
    which leaves every position below as it was, so the arrays are shared (no copy)."""
    dim = _dim_index("unsqueeze", dim, a.dim(), 1)
    if a.dim() >= _C.MAX_ORDER:
        refuse("unsqueeze", a, why=f"scorch supports at most {_C.MAX_ORDER} dimensions and "
                                   f"the tensor has {a.dim()}")
    f = a._format
    fmt = _format_from_tuple((0,) + f.kinds, (True,) + f.unique,
                             (dim,) + tuple(o + (o >= dim) for o in f.order))
    shape = list(a.shape)
    shape.insert(dim, 1)
    return SparseTensor(shape, fmt, [None] + a._pos, [None] + a._crd, a._vals,
                        requires_grad=a._vals.requires_grad, index_dtype=a.index_dtype,
                        checked=True, versions=(None,) + a._iv[:len(a._pos)] + (None,) +
                        a._iv[len(a._pos):])


@_register(torch.squeeze, torch.Tensor.squeeze)
def _squeeze(a, dim=None):
    """Dimensions of size 1 dropped (all of them, or those named that have size 1),
    storing exactly a's stored places (_units_dropped)."""
    n = a.dim()
    dims = range(n) if dim is None else _norm_dims(dim, n)
    units = sorted(d for d in dims if a.shape[d] == 1)
    if not units:
        return a
    return _piece(_units_dropped(a, units), a, "squeeze")


@_register(torch._transformer_encoder_layer_fwd)
def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                   mask=None, mask_type=None):
    """nn.TransformerEncoderLayer's fused inference path (eval, no grad) given a sparse
    mask: the same layer written out (torch's fused kernel reads a dense mask), its
    attention through the sparse-mask SDPA."""
    if _is_sparse(src) or not _is_sparse(mask) or src.dim() != 3:
        refuse("nn.TransformerEncoderLayer", src, mask,
               why="a sparse mask with a dense (batch, seq, feature) input only")
    b, n, e = src.shape
    h = num_heads

    def attend(x):
        q, k, v = F.linear(x, qkv_weight, qkv_bias).split(embed_dim, dim=-1)
        q, k, v = (t.reshape(b, n, h, e // h).transpose(1, 2) for t in (q, k, v))
        a = _sdpa_handler(q, k, v, attn_mask=mask)
        return F.linear(a.transpose(1, 2).reshape(b, n, e), proj_weight, proj_bias)

    def feed(x):
        act = F.gelu if use_gelu else F.relu
        return F.linear(act(F.linear(x, ffn_weight_1, ffn_bias_1)), ffn_weight_2, ffn_bias_2)

    def norm1(x):
        return F.layer_norm(x, (e,), norm_weight_1, norm_bias_1, eps)

    def norm2(x):
        return F.layer_norm(x, (e,), norm_weight_2, norm_bias_2, eps)

    if norm_first:
        x = src + attend(norm1(src))
        return x + feed(norm2(x))
    x = norm1(src + attend(src))
    return norm2(x + feed(x))


# ---- reshape: the entries' coordinates renumbered --------------------------------------

def _new_shape(name, a, shape):
    """torch's reshape rule: ints (or one sequence of them), one -1 inferred, as many
    elements as a."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    try:
        shape = [operator.index(s) for s in shape]
    except TypeError:
        raise TypeError(f"{name}: the shape must be ints, got {shape!r}") from None
    numel = math.prod(a.shape)
    if shape.count(-1) > 1 or any(s < -1 for s in shape):
        raise RuntimeError(f"{name}: invalid shape {shape} (at most one -1, no other "
                           "negative size)")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0:
            raise RuntimeError(f"{name}: cannot reshape a tensor of {numel} elements into "
                               f"shape {shape}: the size -1 is ambiguous")
        shape[shape.index(-1)] = numel // rest
    if math.prod(shape) != numel:
        raise RuntimeError(f"{name}: shape {shape} is invalid for input of size {numel}")
    return tuple(shape)


def _reshaped_format(a: SparseTensor, shape):
    """The result's format, storing exactly a's stored places renumbered (a dense level
    below a sparse one would store whole rows around them, a pattern softmax and SDPA
    read): a's own for as many dimensions where its dense levels are all above its
    sparse ones; else the same family over the new ones (all dense, coo, csr-like dense
    levels over one compressed, csf-like); where dense levels would hold many more
    positions than a has entries or rows, or for other formats, coo."""
    fmt, n = a._format, len(shape)
    kinds = fmt.kinds
    if all(k == 0 for k in kinds):
        return fmt if len(kinds) == n else "d" * n
    own_grid = math.prod(a.shape[d] for d, k in zip(fmt.order, kinds) if k == 0)
    room = max(own_grid, a.nnz, 1)
    first = next(k for k, x in enumerate(kinds) if x != 0)
    if len(kinds) == n and all(x != 0 for x in kinds[first:]):   # (dense levels only
        grid = math.prod(shape[d] for d, k in zip(fmt.order, kinds) if k == 0)   # above:
        if grid <= room:                        # it stores the entries, no place more)
            return fmt
    identity = fmt.order == tuple(range(len(kinds)))
    if identity and kinds[-1] == 1 and all(k == 0 for k in kinds[:-1]) and \
            math.prod(shape[:-1]) <= room:
        return "d" * (n - 1) + "c"
    if identity and all(k == 1 for k in kinds) and all(fmt.unique):
        return "c" * n
    return "coo"


def _reshape(name, a, shape):
    """a's entries at their coordinates in the new shape (row-major order, as torch's
    reshape): a copy, differentiable w.r.t. the values, refusing in-place writes as
    pieces do (torch's view would share the values)."""
    if not _is_sparse(a):
        refuse(name, a, *shape, why="only the SparseTensor is reshaped")
    shape = _new_shape(name, a, shape)
    if shape == tuple(a.shape):
        return a
    if math.prod(shape) > 2 ** 63 - 1:
        refuse(name, a, why=f"shape {list(shape)} has more than 2^63 - 1 elements")
    key = _linear_key(dim_coords(a), a.shape, a.nnz)
    coords = []
    for s in reversed(shape):
        coords.append(key % s if s else key)
        key = key // s if s else key
    coords = torch.stack(coords[::-1]) if coords else torch.zeros(0, a.nnz, dtype=torch.int64)
    return _piece(_entries_of(a, shape, coords, a._vals, _reshaped_format(a, shape)), a, name)


def _fits_in_memory(name, entries, value_bytes):
    """Refuse a result of ``entries`` stored entries that could not fit in this machine's
    memory (a value and an int64 coordinate each, at least): the allocation of its arrays
    would succeed, lazily, and filling them would have the process killed."""
    need = entries * (value_bytes + 8)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):   # (no such query here: no check)
        return
    if have > 0 and need > have:
        raise MemoryError(f"{name}: the result would store {entries} entries, at least "
                          f"{need / 2**30:.1f} GiB, more than this machine's "
                          f"{have / 2**30:.1f} GiB of memory")


@_register(torch.Tensor.expand)
def _expand(a, *sizes, implicit=False):
    """``A.expand(*sizes)``: dimensions of size 1 (and new leading ones) repeated, as
    dense broadcasting places them: each slice holds a's entries.  A copy (torch's is a
    view), refusing in-place writes as pieces do."""
    name = "torch.Tensor.expand"
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    n, m = a.dim(), len(sizes)
    if m < n:
        raise RuntimeError(f"{name}: the number of sizes provided ({m}) must be greater or "
                           f"equal to the number of dimensions in the tensor ({n})")
    shape = []
    for d, s in enumerate(sizes):
        s = operator.index(s)
        own = a.shape[d - (m - n)] if d >= m - n else None
        if s == -1:
            if own is None:
                raise RuntimeError(f"{name}: the expanded size -1 is not allowed in a "
                                   f"leading, new dimension")
            s = own
        if own is not None and own != s and own != 1:
            raise RuntimeError(f"{name}: the expanded size of the tensor ({s}) must match "
                               f"the existing size ({own}) at non-singleton dimension {d}")
        shape.append(s)
    shape = tuple(shape)
    if shape == tuple(a.shape):
        return a
    c = _coalesced(a)
    grown = [d for d in range(m) if d < m - n or c.shape[d - (m - n)] != shape[d]]
    _fits_in_memory(name, c.nnz * math.prod(shape[d] for d in grown), c._vals.element_size())
    lead = [d for d in range(m - n, m) if d in grown]   # (a's own dims that grow: size 1)
    if len(lead) < n and all(d < m - n + len(lead) for d in lead):
        # (only leading dims grow, not all of a's: one einsum, dense levels over them)
        core = _units_dropped(c, list(range(len(lead)))) if lead else c
        return _piece(_broadcast_leading(name, core, shape[:m - core.dim()]), a, "expand")
    coords = [None] * (m - n) + list(dim_coords(c))
    idx = torch.arange(c.nnz)
    for d in grown:   # (each entry once per position of the dimension it grows along)
        k = shape[d]
        coords = [None if x is None else x.repeat(k) for x in coords]
        coords[d] = torch.arange(k).repeat_interleave(idx.numel())
        idx = idx.repeat(k)
    coords = [torch.zeros_like(idx) if x is None else x for x in coords]
    stacked = torch.stack(coords) if coords else torch.zeros(0, idx.numel(), dtype=torch.int64)
    r = _entries_of(c, shape, stacked, c._vals[idx], _reshaped_format(c, shape))
    return _piece(r, a, "expand")


@_register(torch.Tensor.expand_as)
def _expand_as(a, other):
    if not _is_sparse(a):
        return a.expand(tuple(other.shape))
    return _expand(a, tuple(other.shape))


@_register(torch.reshape, torch.Tensor.reshape)
def _reshape_handler(a, *shape, **kwargs):
    if "shape" in kwargs:   # (torch.reshape(input, shape=...))
        shape = (kwargs.pop("shape"),) + shape
    if kwargs:
        raise TypeError(f"torch.reshape got an unexpected keyword argument "
                        f"{next(iter(kwargs))!r}")
    return _reshape("torch.reshape", a, shape)


@_register(torch.Tensor.view)
def _view_handler(a, *shape, dtype=None):
    if dtype is not None or (len(shape) == 1 and isinstance(shape[0], torch.dtype)):
        refuse("torch.Tensor.view(dtype)", a, why="the values' bits reinterpreted",
               hint="convert with .to(dtype)")
    return _reshape("torch.Tensor.view", a, shape)


@_register(torch.Tensor.view_as)
def _view_as_handler(a, other):
    if not _is_sparse(a):   # (a dense tensor shaped as a SparseTensor: torch's own)
        return a.view(tuple(other.shape))
    return _reshape("torch.Tensor.view_as", a, tuple(other.shape))


@_register(torch.Tensor.reshape_as)
def _reshape_as_handler(a, other):
    if not _is_sparse(a):
        return a.reshape(tuple(other.shape))
    return _reshape("torch.Tensor.reshape_as", a, tuple(other.shape))


@_register(torch.flatten, torch.Tensor.flatten)
def _flatten(a, start_dim=0, end_dim=-1):
    n = a.dim()
    if n == 0:
        return _reshape("torch.flatten", a, (1,))
    s, e = _dim_index("torch.flatten", start_dim, n), _dim_index("torch.flatten", end_dim, n)
    if s > e:
        raise RuntimeError("torch.flatten: start_dim cannot come after end_dim")
    sh = a.shape
    return _reshape("torch.flatten", a, (*sh[:s], math.prod(sh[s:e + 1]), *sh[e + 1:]))


@_register(torch.ravel, torch.Tensor.ravel)
def _ravel(a):
    return _reshape("torch.ravel", a, (-1,))


@_register(torch.unflatten, torch.Tensor.unflatten)
def _unflatten(a, dim, sizes):
    d = _dim_index("torch.unflatten", dim, a.dim())
    sizes = [operator.index(x) for x in sizes]
    known = math.prod(x for x in sizes if x != -1)
    if (math.prod(sizes) != a.shape[d] if -1 not in sizes else
            known == 0 or a.shape[d] % known):
        raise RuntimeError(f"torch.unflatten: sizes {sizes} don't multiply up to the size of "
                           f"dim {dim} ({a.shape[d]}) in the input tensor")
    if -1 in sizes:   # (inferred over dimension d: the whole may have no elements)
        sizes[sizes.index(-1)] = a.shape[d] // known
    return _reshape("torch.unflatten", a, (*a.shape[:d], *sizes, *a.shape[d + 1:]))


@_register(torch.stack)
def _stack(tensors, dim=0, *, axis=None, out=None):
    dim = dim if axis is None else axis
    tensors = list(tensors)
    refuse_out("torch.stack", out, *tensors)
    if not tensors or not all(_is_sparse(t) for t in tensors):
        refuse("torch.stack", *tensors, why=_NOT_ALL_SPARSE)
    dim = _dim_index("torch.stack", dim, tensors[0].dim(), 1)
    if any(t.shape != tensors[0].shape for t in tensors):
        raise RuntimeError("torch.stack expects each tensor to be equal size, got "
                           + ", ".join(str(tuple(t.shape)) for t in tensors))
    return _cat([_unsqueeze(t, dim) for t in tensors], dim)


def _collate(batch, *, collate_fn_map=None):
    """DataLoader's default collate for SparseTensors: torch.stack, as in the main
    process.  torch's own (collate_tensor_fn) stacks into a shared-memory tensor with
    out= inside a worker, which scorch refuses (the user wrote no out=); the stacked
    result goes to the main process through shared memory all the same (the pickler's
    reduction)."""
    return _stack(batch, 0)


try:   # (torch's private table; without it, a custom collate_fn still works)
    from torch.utils.data._utils.collate import default_collate_fn_map as _collate_map
    _collate_map.setdefault(SparseTensor, _collate)
except (ImportError, AttributeError):
    pass


@_register(torch.diagonal, torch.Tensor.diagonal)
def _diagonal(a, offset=0, dim1=0, dim2=1):
    """The entries (i, i + offset) of a matrix (of its dims dim1, dim2), as a dense vector
    (duplicates summed), differentiable w.r.t. the values."""
    d1, d2 = _dim_index("torch.diagonal", dim1, a.dim()), _dim_index("torch.diagonal", dim2,
                                                                      a.dim())
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if a.dim() != 2:
        refuse("torch.diagonal", a, why="the diagonal of a matrix is built")
    rows, cols = dim_coords(a) if d1 == 0 else dim_coords(a)[::-1]
    m, n = (a.shape[0], a.shape[1]) if d1 == 0 else (a.shape[1], a.shape[0])
    length = max(0, min(m, n - offset) if offset >= 0 else min(m + offset, n))
    on = cols - rows == offset
    at = rows[on] if offset >= 0 else cols[on]
    return _index_sum(length, at, a._vals[on])


@_register(torch.diag, torch.Tensor.diag)
def _diag(a, diagonal=0, *, out=None):
    """torch.diag of a matrix: its diagonal, as _diagonal's."""
    refuse_out("torch.diag", out, a)
    if a.dim() > 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {a.dim()}D")
    if a.dim() != 2:
        refuse("torch.diag", a, why="the diagonal of a matrix is built (torch.diag of a "
                                    "vector would build a matrix)")
    return _diagonal(a, diagonal)


@_register(torch.trace, torch.Tensor.trace)
def _trace(a):
    """The sum of a matrix's diagonal (of a rectangular one too, as torch's), a 0-D dense
    tensor, differentiable w.r.t. the values; integer values sum in int64 as torch's do."""
    if a.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {a.dim()}")
    return _diagonal(a).sum()


def _triangle(name, a, diagonal, lower, out):
    """The stored entries of ``a`` on or below (``lower``) / on or above the diagonal of
    its last two dimensions, ``diagonal`` above the main one: a SparseTensor in a's
    format (duplicates summed), differentiable w.r.t. the values.  A causal mask of
    sparse attention scores is ``S.tril()``: it stores the kept places only, so where a's
    last level is dense (cd, a dense format), the result's is compressed (a dense one
    would store the dropped places again, as zeros that softmax reads)."""
    refuse_out(name, out, a)
    if a.dim() < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    coords = dim_coords(a)
    off = coords[-1] - coords[-2]
    keep = off <= diagonal if lower else off >= diagonal
    return _entries_of(a, a.shape, torch.stack([c[keep] for c in coords]), a._vals[keep],
                       _compressed_last(a._format))


@_register(torch.tril, torch.Tensor.tril)
def _tril(a, diagonal=0, *, out=None):
    return _triangle("torch.tril", a, int(diagonal), True, out)


@_register(torch.triu, torch.Tensor.triu)
def _triu(a, diagonal=0, *, out=None):
    return _triangle("torch.triu", a, int(diagonal), False, out)


@_register(torch.hstack)
def _hstack(tensors, *, out=None):
    tensors = list(tensors)
    return _cat(tensors, 0 if tensors and tensors[0].dim() == 1 else 1, out=out)


@_register(torch.vstack, torch.row_stack)
def _vstack(tensors, *, out=None):
    tensors = [_unsqueeze(t, 0) if _is_sparse(t) and t.dim() == 1 else t for t in tensors]
    return _cat(tensors, 0, out=out)


@_register(torch.select, torch.Tensor.select)
def _select(a, dim, index):
    return _piece(select(a, dim, int(index)), a, "select")


_INDEX_KINDS = ("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                "Variables are valid indices")


def _index_key(k):
    """One key of ``A[...]`` as torch reads it: ("int", i) for an int or a 0-D integer
    tensor; ("bool", b) for a bool or a 0-D bool / uint8 tensor (an advanced index of one
    position or none on a new dimension of size 1); ("adv", tensor) for an integer tensor
    or a list; ("mask", bool tensor) for a bool / uint8 one (its nonzero positions over as
    many dimensions as it has); ("slice", s), ("new", None), ("...", None).  Anything else
    raises what torch raises."""
    if k is None:
        return "new", None
    if k is Ellipsis:
        return "...", None
    if isinstance(k, bool):
        return "bool", k
    if isinstance(k, slice):
        return "slice", k
    if isinstance(k, numbers.Integral):
        return "int", int(k)
    if isinstance(k, (list, tuple)):
        k = _index_tensor(list(k))
    elif not isinstance(k, torch.Tensor):
        if isinstance(k, str):       # (torch reads a str as a sequence: no tensor of it)
            raise TypeError(f"indexing: a str ({k!r}) is not an index")
        raise IndexError(f"{_INDEX_KINDS} (got {type(k).__name__})")
    if k.dtype in (torch.bool, torch.uint8):
        return ("bool", bool(k)) if k.dim() == 0 else ("mask", k.bool())
    if k.is_floating_point() or k.is_complex():
        raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors "
                         f"(got {k.dtype})")
    return ("int", int(k)) if k.dim() == 0 else ("adv", k)


def _pointwise(a: SparseTensor, keys) -> torch.Tensor:
    """``A[r, c]`` with every dimension indexed by an integer tensor, list or int: the
    values at the positions the indices pair up (broadcast together, negative ones
    counting from the end, as torch's advanced indexing), a dense tensor of the indices'
    broadcast shape, an absent position 0 and repeated coordinates summed.  A compiled
    product with one 0/1 selection matrix per dimension (row k of the one for dim d holds
    a 1 at the k-th position's coordinate along d): ``out(k) = A(i,j) R(k,i) C(k,j)``,
    O(entries of the rows read) per position, differentiable like any einsum."""
    idx = []
    for d, k in enumerate(keys):
        t = _index_tensor(k)
        if t.dtype not in (torch.int32, torch.int64):     # (torch's: long or int)
            raise IndexError(f"indexing: the index of dimension {d} must be an int64 or "
                             f"int32 tensor to pair up with the others, got {t.dtype}")
        idx.append(t.to(torch.int64))
    idx = torch.broadcast_tensors(*idx)
    shape, n = idx[0].shape, idx[0].numel()
    letters = "abcdefghijlmnopq"[:a.dim()]            # ('k' is the positions')
    it = torch.int32 if max(max(a.shape, default=0), n) <= _tensor._I32_MAX else torch.int64
    pos, ones = torch.arange(n + 1, dtype=it), torch.ones(n, dtype=a.dtype)  # (shared)
    sel = []
    for d, t in enumerate(idx):
        size = a.shape[d]
        t = t.reshape(-1)
        if n:
            lo, hi = (int(v) for v in t.aminmax())
            if lo < -size or hi >= size:
                bad = lo if lo < -size else hi
                raise IndexError(f"index {bad} is out of bounds for dimension {d} with size "
                                 f"{size}")
            if lo < 0:
                t = torch.where(t < 0, t + size, t)
        sel.append(SparseTensor((n, size), _CSR_LIKE[(0, 1)], [None, pos], [None, t.to(it)],
                                ones, index_dtype=it, checked=True))
    expr = letters + "," + ",".join("k" + c for c in letters) + "->k"
    r = einsum(expr, a, *sel)
    return (r.to_dense() if _is_sparse(r) else r).reshape(shape)


def _as_torch_key(k):
    """A NumPy index as torch reads it: an integer scalar as an int, a bool scalar as a
    bool, an array as a tensor."""
    if type(k).__module__ != "numpy":
        return k
    if isinstance(k, numbers.Integral):
        return int(k)
    if getattr(k, "dtype", None) is not None and k.shape == () and k.dtype.kind == "b":
        return bool(k)
    return torch.as_tensor(k) if hasattr(k, "__array__") else k


@_register(torch.Tensor.__getitem__)
def _getitem(a, key):
    """A[rows], A[a:b:s], A[:, cols], A[mask], A[i], A[i, j], A[r, c], as torch's indexing:
    an integer drops its dimension (select), a slice or one 1-D index tensor (or list, or
    mask) selects along one (index_select: a SparseTensor of a's format), ``...`` stands for
    the dimensions not indexed, ``None`` adds one of size 1 (unsqueeze, a view).  The
    advanced indices (index tensors, lists, masks, and bools, which torch reads as an index
    of one position or none on a new dimension of size 1) broadcast together; their result
    dimensions stand where the first of them stands when nothing (a slice, ``None``, a
    dimension of the ``...``) separates them, else in front, as torch places them.  Index
    tensors on every dimension that is not an integer's pair up (``_pointwise``: a dense
    result); several index tensors, or a multi-dimensional one, beside slices are
    refused."""
    keys = key if isinstance(key, tuple) else (key,)
    kinds = [_index_key(_as_torch_key(k)) for k in keys]
    n = a.dim()
    used = sum(k == "mask" and v.dim() or k in ("int", "slice", "adv") for k, v in kinds)
    ellipses = sum(k == "..." for k, _ in kinds)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > n:
        raise IndexError(f"too many indices for a {n}-D tensor: {used}")
    # The output's dimensions in order (plan): "new" (None), "adv" (an advanced index's
    # place), or the dimension of a that a slice or the ... keeps; then a's dimensions left.
    plan, adv, ints, slices, d = [], [], [], [], 0
    for k, v in kinds:
        if k == "new":
            plan.append("new")
        elif k == "...":
            plan.extend(range(d, d + n - used))
            d += n - used
        elif k == "int":
            ints.append((d, v))     # (dropped last, from the highest dim down)
            d += 1
        elif k == "slice":
            plan.append(d)
            if v != slice(None):
                slices.append((d, v))
            d += 1
        elif k == "bool":
            plan.append("adv")
            adv.append((None, torch.zeros(int(v), dtype=torch.int64)))
        elif k == "adv":
            plan.append("adv")
            adv.append((d, v))
            d += 1
        else:                       # (a mask: its nonzero positions, one index a dim)
            m = v.dim()
            if tuple(v.shape) != tuple(a.shape[d:d + m]):
                raise IndexError(f"indexing: a boolean mask along dim {d} needs "
                                 f"{a.shape[d]} entries, got shape {tuple(v.shape)}" if m == 1
                                 else f"indexing: a boolean mask over dims {d}..{d + m - 1} "
                                 f"needs shape {tuple(a.shape[d:d + m])}, got "
                                 f"{tuple(v.shape)}")
            plan.extend(["adv"] * m)
            adv.extend((d + j, c) for j, c in enumerate(v.nonzero().unbind(1)))
            d += m
    plan.extend(range(d, n))
    shape = ()
    if adv:
        shape = [1] * max(t.dim() for _, t in adv)   # (broadcast: torch's costs ~10 us)
        for _, t in adv:
            for p, s in enumerate(t.shape, len(shape) - t.dim()):
                if s != 1 and shape[p] not in (1, s):
                    raise IndexError("shape mismatch: indexing tensors could not be broadcast "
                                     "together with shapes " + ", ".join(
                                         str(list(t.shape)) for _, t in adv))
                shape[p] = s if s != 1 else shape[p]
        shape = torch.Size(shape)
        at = [p for p, e in enumerate(plan) if e == "adv"]
        first = at[0] if at[-1] - at[0] + 1 == len(at) else 0
        plan = [e for e in plan[:first] if e != "adv"] + ["adv"] + \
            [e for e in plan[first:] if e != "adv"]
    real = [(d, t) for d, t in adv if d is not None]
    if len(real) > 1 or real and real[0][1].dim() != 1:
        sliced = any(isinstance(e, int) for e in plan)
        for d, t in (real if sliced else []) + [(d, torch.tensor(i)) for d, i in ints]:
            lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, -1)   # (torch's
            if lo < -a.shape[d] or hi >= a.shape[d]:                          # errors)
                raise IndexError(f"index {lo if lo < -a.shape[d] else hi} is out of bounds "
                                 f"for dimension {d} with size {a.shape[d]}")
        if sliced:
            refuse(f"A[{key!r}]", a, why="multi-dimensional index tensors are not built "
                   "beside slices" if len(real) == 1 else "several index tensors beside "
                   "slices are not built; index every dimension with integer tensors "
                   "(their positions pair up pointwise), or one dimension at a time")
        paired = dict(ints)
        paired.update((d, t.expand(shape)) for d, t in real)
        out = _pointwise(a, [paired[d] for d in range(n)])
        return out.reshape([1 if e == "new" else s for e in plan
                            for s in (shape if e == "adv" else (1,))])
    out = a
    if real:                        # (one 1-D index: the selection along its dimension)
        d, t = real[0]
        out = index_select(out, d, t if t.shape == shape else t.expand(shape), "indexing")
    for d, s in slices:
        start, stop, step = s.indices(a.shape[d])
        if step <= 0:
            raise ValueError("step must be greater than zero")
        out = index_select(out, d, range(start, max(start, stop), step), "indexing")
    for d, i in reversed(ints):
        out = select(out, d, i)
    if real:                        # (the indices' dimension where torch places it)
        kept = [e for e in plan if isinstance(e, int) or e == "adv"]
        at, want = sum(isinstance(e, int) and e < real[0][0] for e in kept), kept.index("adv")
        if at != want:
            perm = [q for q in range(len(kept)) if q != at]
            perm.insert(want, at)
            out = _permuted(out, perm)
    for p, e in enumerate(plan):    # (the dimensions added: None's, bools' if alone)
        if e == "new" or e == "adv" and not real:
            empty = e == "adv" and shape[0] == 0
            if not _is_sparse(out):
                out = out.unsqueeze(p)[(slice(None),) * p + (slice(0, 0 if empty else 1),)]
                continue
            out = _unsqueeze(out, p)
            if empty:
                out = index_select(out, p, torch.zeros(0, dtype=torch.int64), "indexing")
    # (integers, slices, ... and None only: torch's result is a view, scorch's a piece)
    return out if adv else _piece(out, a, "A[...]")


@_register(torch.Tensor.to)
def _to(a, *args, copy=False, **kwargs):
    device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    if device is not None and torch.device(device).type != "cpu":
        refuse(f"Tensor.to({device})", a, why="scorch tensors live on the CPU")
    if dtype is None or dtype == a.dtype:
        return a.clone() if copy else a
    if dtype not in VALUE_DTYPES:
        why = (" (A != 0 gives a dense bool tensor; A.to(torch.uint8) stays sparse)"
               if dtype is torch.bool else "")
        raise TypeError(f"scorch stores {VALUE_DTYPE_NAMES} values, not {dtype}{why}")
    return _map_values(a, lambda v: v.to(dtype))


_TYPE_NAMES = {"torch.FloatTensor": torch.float32, "torch.DoubleTensor": torch.float64,
               "torch.BFloat16Tensor": torch.bfloat16, "torch.HalfTensor": torch.float16,
               "torch.IntTensor": torch.int32, "torch.LongTensor": torch.int64,
               "torch.ShortTensor": torch.int16, "torch.CharTensor": torch.int8,
               "torch.ByteTensor": torch.uint8}


@_register(torch.Tensor.type)
def _type(a, dtype=None, non_blocking=False, **kwargs):
    if dtype is None:
        return next(k for k, v in _TYPE_NAMES.items() if v == a.dtype)
    if isinstance(dtype, str):
        if dtype not in _TYPE_NAMES:
            raise TypeError(f"scorch stores {VALUE_DTYPE_NAMES} values, not {dtype}")
        dtype = _TYPE_NAMES[dtype]
    return _to(a, dtype)


def _cast(dtype):
    def handler(a, memory_format=None):
        return _to(a, dtype)
    return handler


for _method, _dtype in ((torch.Tensor.double, torch.float64), (torch.Tensor.float, torch.float32),
                        (torch.Tensor.bfloat16, torch.bfloat16),
                        (torch.Tensor.half, torch.float16), (torch.Tensor.int, torch.int32),
                        (torch.Tensor.long, torch.int64), (torch.Tensor.short, torch.int16),
                        (torch.Tensor.char, torch.int8), (torch.Tensor.byte, torch.uint8)):
    _register(_method)(_cast(_dtype))


def _like(name, a, values_of, dtype, layout, device, requires_grad):
    """A SparseTensor like ``a`` (its shape and format) for torch's ``*_like``
    factories: ``values_of(dtype, n)`` gives its n values over a's pattern, or None for
    no stored entries.  As for torch's CSR tensors: zeros_like stores nothing, ones_like,
    full_like and empty_like keep a's pattern (a coo's duplicates once: ones_like is 1
    there, not their count)."""
    if device is not None and torch.device(device).type != "cpu":
        refuse(f"{name}(device={device})", a, why="scorch tensors live on the CPU")
    if layout is not None and layout is not a.layout:
        refuse(f"{name}(layout={layout})", a, why="the result is a SparseTensor like the "
                                                  "input; use .to_dense() for a dense one")
    dtype = a.dtype if dtype is None else dtype
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"scorch stores {VALUE_DTYPE_NAMES} values, not {dtype}")
    a = _coalesced(a)
    vals = values_of(dtype, a.nnz)
    if vals is None:
        r = _entries_of(a, a.shape, torch.zeros((a.dim(), 0), dtype=torch.int64),
                        torch.zeros(0, dtype=dtype), a._format)
        return r.requires_grad_() if requires_grad else r
    return a._rewrap(vals, requires_grad=requires_grad)


@_register(torch.zeros_like)
def _zeros_like(a, *, dtype=None, layout=None, device=None, pin_memory=None,
                requires_grad=False, memory_format=None):
    return _like("torch.zeros_like", a, lambda d, n: None, dtype, layout, device,
                 requires_grad)


@_register(torch.ones_like)
def _ones_like(a, *, dtype=None, layout=None, device=None, pin_memory=None,
               requires_grad=False, memory_format=None):
    return _like("torch.ones_like", a, lambda d, n: torch.ones(n, dtype=d), dtype, layout,
                 device, requires_grad)


@_register(torch.full_like)
def _full_like(a, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
               requires_grad=False, memory_format=None):
    return _like("torch.full_like", a, lambda d, n: torch.full((n,), fill_value, dtype=d),
                 dtype, layout, device, requires_grad)


@_register(torch.empty_like)
def _empty_like(a, *, dtype=None, layout=None, device=None, pin_memory=None,
                requires_grad=False, memory_format=None):
    return _like("torch.empty_like", a, lambda d, n: torch.empty(n, dtype=d), dtype, layout,
                 device, requires_grad)


@_register(torch.Tensor.type_as)
def _type_as(a, other):
    return _to(a, other.dtype)


@_register(torch.Tensor.copy_)
def _copy_(dst, src, non_blocking=False):
    """dst takes src's entries in place (Module.load_state_dict copies each buffer so):
    src converted to dst's format and index width, its values copied in dst's dtype.
    Where that is dst's pattern, the values are written into dst's values array, so every
    alias of dst (``dst.detach()``, a ``state_dict()`` entry, ``AveragedModel``'s copy
    target) sees them, as a dense copy_ writes the shared storage.  Another pattern
    replaces dst's arrays (the wrapper object stays): tensors that shared the old ones
    keep them, and what scorch kept of them is dropped."""
    if not _is_sparse(dst):
        refuse("Tensor.copy_", dst, src, why="a dense tensor takes a sparse one's entries "
                                             "through src.to_dense()")
    if tuple(src.shape) != dst._shape:
        raise RuntimeError(f"copy_: the source's shape {tuple(src.shape)} differs from the "
                           f"destination's {dst._shape}")
    if torch.is_grad_enabled() and dst.requires_grad:
        raise RuntimeError("a leaf SparseTensor that requires grad cannot be written in "
                           "place; use torch.no_grad() (as load_state_dict does)")
    if _is_sparse(src):
        src = src.to_format(dst.format, dst.index_dtype, drop_zeros=False)
    else:
        from ._convert import to_sparse
        src = to_sparse(src.detach(), dst.format, dst.index_dtype)
    if _same_arrays(src, dst):
        with torch.no_grad():
            dst._vals.copy_(src._vals)
        return dst
    owner = getattr(dst, "_pattern_owner", None)
    if owner is not None:
        raise RuntimeError(f"copy_ into {owner} of another pattern: the layer keeps its "
                           "pattern in its row_ptr / col_idx buffers (load_state_dict, or "
                           "copy_ into them, changes it)")
    vals = src._vals.detach().to(dst.dtype, copy=True)
    vals.requires_grad_(dst._vals.requires_grad)
    dst._pos, dst._crd, dst._iv = list(src._pos), list(src._crd), src._iv   # (src: made
    # just above, by a conversion that checked the caller's arrays)
    dst._vals = vals   # (values last)
    _replaced(dst)
    return dst


def _replaced(a):
    """After a's arrays were replaced: what scorch kept of the old ones dropped, and every
    operand prepared so far retired (a thread that read a's arrays while they were being
    replaced may still store a description of the old or mixed ones: its epoch is then
    past; see _compiler._sparse_operand)."""
    a._desc = a._transposed = a._kernels = a._has_dups = None
    retire_prepared()


# The unbound torch.Tensor methods that SparseTensor overrides run its own
# (torch.Tensor.to_dense(A) reached aten's, which returned A itself: nothing densified).
for _name in ("values", "indices", "to_dense", "_values", "_indices"):
    _register(getattr(torch.Tensor, _name))(getattr(SparseTensor, _name))


@_register(torch.Tensor.is_shared)
def _is_shared(a):
    """Whether the index and value arrays are all in shared memory (the wrapper has no
    storage of its own)."""
    return all(x.is_shared() for x in a._pos + a._crd + [a._vals] if x is not None)


@_register(torch.Tensor.share_memory_)
def _share_memory_(a):
    """The index and value arrays moved to shared memory (torch's own call would move a
    storage the wrapper does not have)."""
    a._share_arrays()
    return a


@_register(torch.Tensor.__dlpack__, torch.Tensor.__dlpack_device__)   # (from_dlpack)
def _dlpack(a, *args, **kwargs):
    refuse("DLPack export", a, why="DLPack describes strided arrays; export "
                                   "A.values() and A.indices(level), or A.to_dense()")


def _guard_to_dlpack():
    """torch.to_dlpack (torch.utils.dlpack.to_dlpack) is a C function with no subclass
    hook: on a SparseTensor it exports the storage the wrapper does not have, and the
    consumer segfaults.  Both names get a guard that refuses a SparseTensor and passes
    every other tensor to torch's function as it is."""
    import torch.utils.dlpack as dlpack

    raw = dlpack.to_dlpack
    if getattr(raw, "_scorch_guard", False):
        return

    @functools.wraps(raw)
    def to_dlpack(tensor):
        if isinstance(tensor, SparseTensor):
            _dlpack(tensor)
        return raw(tensor)

    to_dlpack._scorch_guard = True
    dlpack.to_dlpack = to_dlpack
    if getattr(torch, "to_dlpack", None) is raw:
        torch.to_dlpack = to_dlpack


_guard_to_dlpack()


@_register(torch.Tensor.apply_, torch.Tensor.map_, torch.Tensor.map2_)
def _apply_(a, *args, **kwargs):
    # (apply_ runs a Python callable over the storage the wrapper does not have: a segfault)
    refuse("Tensor.apply_/map_", a, why="scorch never writes a tensor in place; map the "
                                        "values instead: A.with_values(f(A.values()))")


# ---- torch's sparse accessors --------------------------------------------------------------
# Code written for torch.sparse asks these of a sparse tensor.  Each stored value is one
# entry (values() is 1-D), so every dimension counts as sparse; the compressed-index
# accessors answer for the format whose arrays they name, as torch's do for its layout.

@_register(torch.Tensor._nnz)
def _nnz(a):
    return a.nnz


@_register(torch.Tensor.sparse_dim)
def _sparse_dim(a):
    return a.dim()


@_register(torch.Tensor.dense_dim)
def _dense_dim(a):
    return 0


def _compressed_accessor(accessor, fmt_name, which):
    def get(a):
        if a._format.name != fmt_name:
            raise RuntimeError(f"{accessor}() needs a {fmt_name} SparseTensor, and this one "
                               f"is {a._format}; convert it with .to_format({fmt_name!r}) "
                               f"or read its level arrays with .indices(level)")
        return a._pos[1] if which == "pos" else a._crd[1]
    return get


for _name, _fmt, _which in (("crow_indices", "csr", "pos"), ("col_indices", "csr", "crd"),
                            ("ccol_indices", "csc", "pos"), ("row_indices", "csc", "crd")):
    _register(getattr(torch.Tensor, _name))(_compressed_accessor(_name, _fmt, _which))


def has_duplicates(a: SparseTensor) -> bool:
    """Whether two stored entries share every coordinate (only a format with a non-unique
    level can hold such).  Entries are sorted, so below a non-unique innermost level
    duplicates are adjacent; a non-unique level above others (``c(nonunique)d``, from
    from_components) can repeat a whole subtree, and the keys are sorted first."""
    unique = a._format.unique
    if all(unique) or a.nnz < 2:
        return False
    if a._has_dups is None:   # (kept on the tensor: its index arrays never change)
        key = _linear_key(level_coords(a), [a.shape[d] for d in a._format.order])
        if unique[-1]:
            key = key.sort().values
        a._has_dups = bool((key[1:] == key[:-1]).any())
    return a._has_dups


@_register(torch.Tensor.is_coalesced)
def _is_coalesced(a):
    return not has_duplicates(a)


@_register(torch.Tensor.coalesce)
def _coalesce(a):
    # (a conversion sums duplicates, as torch's coalesce does; the format stays)
    return a.to_format(a.format) if has_duplicates(a) else a


def _to_sparse_as(a, name, fmt, dense_dim=None, blocksize=None):
    if blocksize is not None:
        refuse(f"Tensor.{name}(blocksize=)", a, why="blocked formats are not built yet")
    if dense_dim:
        refuse(f"Tensor.{name}(dense_dim={dense_dim})", a,
               why="values are one per stored entry (no dense trailing dimensions)")
    return a if a._format == Format.parse(fmt, a.dim()) else a.to_format(fmt)


@_register(torch.Tensor.to_sparse_csr)
def _to_sparse_csr(a, dense_dim=None):
    return _to_sparse_as(a, "to_sparse_csr", "csr", dense_dim)


@_register(torch.Tensor.to_sparse_csc)
def _to_sparse_csc(a, dense_dim=None):
    return _to_sparse_as(a, "to_sparse_csc", "csc", dense_dim)


_LAYOUT_FORMATS = {torch.sparse_coo: "coo", torch.sparse_csr: "csr", torch.sparse_csc: "csc"}


@_register(torch.Tensor.to_sparse, torch.Tensor.to_sparse_coo)
def _to_sparse(a, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    if sparse_dim is not None and sparse_dim != a.dim():
        refuse(f"Tensor.to_sparse(sparse_dim={sparse_dim})", a,
               why="every dimension of a SparseTensor is sparse")
    if layout is not None and layout not in _LAYOUT_FORMATS:
        refuse(f"Tensor.to_sparse(layout={layout})", a,
               why="the layouts with a scorch format are sparse_coo, sparse_csr and "
                   "sparse_csc")
    return _to_sparse_as(a, "to_sparse", _LAYOUT_FORMATS.get(layout, "coo"), dense_dim,
                         blocksize)


@_register(torch.Tensor.data.__get__)
def _data(a):
    """``A.data``: the same arrays around detached values (no history, as torch's)."""
    return a._rewrap(a._vals.detach())


@_register(torch.Tensor.data.__set__)
def _set_data(a, value):
    """``A.data = B`` with B a SparseTensor: A becomes B's tensor (shape, dtype, format and
    arrays, shared as torch's set_data shares storage), keeping its identity and
    requires_grad; ``Module._apply`` (``model.double()``, ``.to(...)``, ``.cpu()``) sets
    each parameter so, then its gradient.  A takes a new values tensor (B's values):
    views made before (``A.t()``, ``A.with_values(p)``'s p, which share the old one)
    keep the old data, as a dense view keeps the old storage.  Where B has A's pattern,
    A's gradient (in B's dtype) and its hooks go over to the new values, as a dense
    tensor keeps both through set_data (Module._apply converts the grad next, and
    asserts it is there); of another pattern they are the old pattern's, and go.  A
    dense B is refused: the wrapper has no storage to take."""
    if not _is_sparse(value):
        refuse("A.data = ...", a, value, why="a SparseTensor takes only another "
               "SparseTensor's arrays (torch.Tensor.set_data would give it a dense "
               "storage behind its arrays)", hint="build a new SparseTensor, or use "
               "A.copy_(B) (B's arrays in A's format) or A.with_values(v)")
    grad = a._vals.requires_grad
    vals = value._vals.detach()
    if grad and not (vals.is_floating_point() or vals.is_complex()):
        raise RuntimeError(f"A.data = B: A requires grad and B's values are {vals.dtype}; "
                           "only floating point and complex tensors can require grad")
    old, new = a._vals, vals.requires_grad_(grad)
    carry = old.grad_fn is None and (old.grad is not None or bool(old._backward_hooks)) \
        and _same_arrays(value, a)   # (a leaf's grad and hooks, of A's pattern)
    torch._C.TensorBase.data.__set__(a, value)   # (the wrapper's sizes and dtype: B's)
    a._format, a._index_dtype, a._shape = value._format, value._index_dtype, value._shape
    a._pos, a._crd, a._iv = list(value._pos), list(value._crd), value._iv
    if carry:
        if old.grad is not None:
            new.grad = old.grad.detach().to(new.dtype)
        if old._backward_hooks:
            new._backward_hooks = old._backward_hooks   # (the same dict: handles remove)
    a._vals = new   # (last: _compiler._transposed reads them first)
    _replaced(a)


@_register(torch.Tensor.detach, torch.detach)
def _detach(a):
    return a._rewrap(a._vals.detach())


@_register(torch.clone, torch.Tensor.clone)
def _clone(a, *, memory_format=None):
    return a.clone()


# ---- hooks: the gradient lives on the values -------------------------------------------

@_register(torch.Tensor.register_hook)
def _register_hook(a, hook):
    """``hook(grad)`` sees the gradient as a SparseTensor with ``a``'s pattern and may return
    a replacement: a SparseTensor with that pattern, or its values."""
    if not a._vals.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    pattern = _pattern(a)

    def on_values(g):
        r = hook(pattern._rewrap(g))
        if isinstance(r, SparseTensor):
            if not _same_arrays(r, pattern):
                raise ValueError("a SparseTensor's gradient hook must return a gradient with "
                                 "the tensor's pattern (or its values), or None")
            return r._vals
        if isinstance(r, torch.Tensor) and r.shape != g.shape:
            name = getattr(hook, "__qualname__", type(hook).__name__)
            raise RuntimeError(f"hook '{name}' returned a gradient of shape "
                               f"{tuple(r.shape)}: a SparseTensor's gradient hook returns a "
                               f"SparseTensor with the tensor's pattern, its values (shape "
                               f"{tuple(g.shape)}), or None")
        return r
    return a._vals.register_hook(on_values)


def _seq(x):
    return (x,) if x is None or isinstance(x, torch.Tensor) else tuple(x)


def _values_of(ts):
    """SparseTensors replaced by their values (where their autograd history is)."""
    return tuple(t._vals if isinstance(t, SparseTensor) else t for t in ts)


def _gradients_of(outputs, grads, name):
    """The values of gradients given for ``outputs``: a SparseTensor gradient of a sparse
    output must have its pattern (its values pair with the output's entry by entry); a
    dense one, of the output's shape, is read at the output's stored coordinates (the
    gradient of each entry, repeated ones alike); none, for a sparse output of one
    element, is ones (torch's implicit gradient: of a scalar output only)."""
    if all(g is None for g in grads) and not any(_is_sparse(o) for o in outputs):
        return grads
    if len(grads) == 1 and grads[0] is None:
        grads = (None,) * len(outputs)
    if len(grads) != len(outputs):
        return _values_of(grads)   # (torch names the mismatch)
    out = []
    for i, (o, g) in enumerate(zip(outputs, grads)):
        if isinstance(g, SparseTensor):
            if not isinstance(o, SparseTensor) or not _same_arrays(o, g):
                raise ValueError(f"{name}: a SparseTensor gradient must have its output's "
                                 f"pattern (shape, format and stored coordinates)")
            g = g._vals
        elif _is_sparse(o) and g is None:
            if math.prod(o.shape) != 1:
                raise RuntimeError(f"{name}: grad can be implicitly created only for "
                                   f"scalar outputs (output {i} is a SparseTensor of shape "
                                   f"{tuple(o.shape)})")
            g = torch.ones_like(o._vals)
        elif _is_sparse(o) and isinstance(g, torch.Tensor):
            if tuple(g.shape) != tuple(o.shape):
                raise RuntimeError(f"{name}: Mismatch in shape: grad_output[{i}] has a shape "
                                   f"of {list(g.shape)} and output[{i}] has a shape of "
                                   f"{list(o.shape)}")
            g = g[tuple(dim_coords(o))] if o.dim() else g.expand(o._vals.shape)
        out.append(g)
    return tuple(out)


@_register(torch.autograd.grad)
def _autograd_grad(outputs, inputs, grad_outputs=None, *args, **kwargs):
    """torch.autograd.grad where outputs or inputs are SparseTensors: the graph runs through
    their values, and the gradient of a sparse input comes back in its pattern."""
    outputs, inputs = _seq(outputs), _seq(inputs)
    if kwargs.get("is_grads_batched") or (len(args) > 4 and args[4]):
        refuse("torch.autograd.grad(is_grads_batched=True)", *outputs, *inputs,
               why="batched gradients through a SparseTensor's values",
               hint="loop over the gradients, or use .to_dense()")
    grads = torch.autograd.grad(_values_of(outputs), _values_of(inputs),
                                _gradients_of(outputs, _seq(grad_outputs),
                                              "torch.autograd.grad"), *args, **kwargs)
    return tuple(i._rewrap(g) if isinstance(i, SparseTensor) and g is not None else g
                 for i, g in zip(inputs, grads))


@_register(torch.autograd.backward)
def _autograd_backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
                       grad_variables=None, inputs=None):
    tensors = _seq(tensors)
    grad_tensors = _gradients_of(tensors, _seq(grad_tensors), "backward")
    torch.autograd.backward(_values_of(tensors), grad_tensors, retain_graph, create_graph,
                            grad_variables, None if inputs is None else _values_of(_seq(inputs)))


@_register(torch.Tensor.backward)
def _backward(a, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    _autograd_backward(a, gradient, retain_graph, create_graph, inputs=inputs)


@_register(torch.Tensor.register_post_accumulate_grad_hook)
def _register_post_accumulate_grad_hook(a, hook):
    """``hook(a)`` once the values' gradient has been accumulated (a leaf's)."""
    return a._vals.register_post_accumulate_grad_hook(lambda v: hook(a))


@_register(torch.Tensor.retain_grad)
def _retain_grad(a):
    """A result's gradient kept after backward, read as ``a.grad``."""
    a._vals.retain_grad()


@_register(torch.Tensor.requires_grad.__set__)
def _set_requires_grad(a, requires_grad):
    _requires_grad_(a, requires_grad)


@_register(torch.Tensor.requires_grad_)
def _requires_grad_(a, requires_grad=True):
    v = a._vals
    if v.grad_fn is not None and not requires_grad:
        raise RuntimeError("you can only change requires_grad flags of leaf variables; "
                           "use .detach()")
    if v.grad_fn is None:
        v.requires_grad_(requires_grad)
    with torch._C.DisableTorchFunctionSubclass():
        torch.Tensor.requires_grad_(a, requires_grad)
    if requires_grad:
        _tensor.route_wrapper_grad(a)
    return a


