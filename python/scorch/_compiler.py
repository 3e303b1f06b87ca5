"""The compiler's Python API: scorch.einsum, scorch.kernel, scorch.explain, Schedule.

Operands are SparseTensors (any format) or dense torch tensors (any strides: a dense
tensor whose strides are a permutation of contiguous ones is passed as a dense format
with that level order, without a copy; other strides are copied).  All the work — parsing,
lowering, scheduling, code generation, compiling and running — happens in the C core.
"""
from __future__ import annotations

import atexit
import functools
import importlib.machinery
import os
import re
import time
import weakref

import torch
from torch.autograd import forward_ad as _fwad

from . import _C
from ._format import Format, _format_from_tuple
from ._tensor import (_INDEX_NAMES, _INDEX_OF_NAME, COMPUTE_DTYPES, WIDENED, SparseTensor,
                      _compiling, _torch, _wrap, check_indices, index_record, outside,
                      outside_graph)

_LANG_EINSUM, _LANG_INDEX = 0, 1
_HERE = os.path.dirname(os.path.abspath(__file__))


def _include_dir() -> str:
    """Where scorch_rt.h is: installed with the package, or the source tree (editable)."""
    for d in (os.path.join(_HERE, "include"),
              os.path.join(_HERE, "..", "..", "csrc", "runtime")):
        if os.path.isfile(os.path.join(d, "scorch_rt.h")):
            return os.path.abspath(d)
    raise RuntimeError("scorch_rt.h not found next to the package; reinstall scorch")


def _aot_path():
    """The ahead-of-time kernels built with the package (setup.py: scorch._aot), or None
    (not built, or SCORCH_AOT=0)."""
    if os.environ.get("SCORCH_AOT", "1") == "0":
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_HERE, "_aot" + suffix)
        if os.path.isfile(path):
            return path
    return None


def _check_cache_bytes():
    """$SCORCH_CACHE_BYTES as the C core reads it (a positive byte count, K / M / G allowed,
    up to 2^40 bytes); anything else is ignored there (sysfs's size is used), said here."""
    v = os.environ.get("SCORCH_CACHE_BYTES", "")
    m = re.fullmatch(r"\s*\+?([0-9]+)([KMG]?)\s*", v, flags=re.ASCII)   # (C's isspace)
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)] if m else 1
    if v and not (m and 0 < int(m.group(1)) * scale <= 1 << 40):
        import warnings

        warnings.warn(f"SCORCH_CACHE_BYTES={v!r} is not a byte count such as 33554432 or "
                      f"32M; ignored (the cache size from sysfs is used)", stacklevel=3)


_check_cache_bytes()
_C.set_include_dir(_include_dir())
_C.set_aot(_aot_path())


def _set_torch(dlpack=True):
    """Hand the extension the torch objects it uses.  dlpack=False keeps it off torch's
    DLPack exchange table: the attribute and NumPy route a torch without the table takes
    (tests/test_dlpack_exchange.py runs both)."""
    _C.set_torch(torch.float32, torch.float64, torch.int32, torch.int64, torch.from_numpy,
                 torch.Tensor, SparseTensor, torch.is_grad_enabled, torch.get_num_threads,
                 dlpack)


_set_torch()


class Schedule:
    """A schedule in its text form, e.g. ``Schedule("order(i,k,j) parallel(i)")``.  The
    compiler checks it when applied and refuses an illegal one with the reason."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"a schedule is text, not {type(text).__name__}")
        self.text = text

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"Schedule({self.text!r})"

    def __eq__(self, other):
        return isinstance(other, Schedule) and other.text == self.text

    def __hash__(self):
        return hash(self.text)


def _schedule_text(schedule):
    """A schedule argument (None, text or a Schedule) as text; anything else is a
    TypeError here rather than a parse error about its str()."""
    if schedule is None or isinstance(schedule, Schedule):
        return None if schedule is None else schedule.text
    return Schedule(schedule).text


def _dense_operand(x: torch.Tensor, dtype):
    """(desc, signature) for a dense tensor; desc is the tensor itself when it is
    contiguous (the extension reads its data pointer and shape), else (shape, fmt, pos,
    crd, values array, index) of a permuted view or a copy."""
    if not x.is_cpu:
        raise ValueError(f"scorch runs on the CPU; an operand is on {x.device}")
    if x.dtype is not dtype:
        x = x.to(dtype)
    if x.is_neg():   # (a negated view: its memory holds the values before negation)
        x = x.resolve_neg()
    if x.is_contiguous() and (1 not in x.shape or x.stride() == _row_major(x.shape)):
        n = x.dim()
        if not n:
            raise ValueError(_SCALAR_OPERAND)
        if n > _C.MAX_ORDER:
            raise ValueError(f"scorch supports at most {_C.MAX_ORDER} dimensions, an "
                             f"operand has {n}")
        return x, _DENSE_SIG[n] if 1 not in x.shape else _with_ones(_DENSE_SIG[n], x)
    if x.requires_grad:
        x = x.detach()
    n = x.dim()
    if n == 0:
        raise ValueError(_SCALAR_OPERAND)
    # Level order = dimensions by decreasing stride (a permutation view, no copy).
    perm = tuple(sorted(range(n), key=lambda d: (-x.stride(d), d)))
    xp = x.permute(perm)
    if not xp.is_contiguous():
        perm, xp = tuple(range(n)), x.contiguous()
    data = xp.reshape(-1)
    fmt, levels, sig = _dense_kind(n, perm)
    if 1 in x.shape:
        sig = _with_ones(sig, x)
    return (tuple(x.shape), fmt, levels, levels, data.numpy(), "int32"), sig


def _row_major(shape):
    """The strides of a row-major tensor of this shape.  torch calls a tensor contiguous
    whatever the strides of its dimensions of size 1: a transposed view of one row or
    column (`Y.t()` of a 1 x n Y) keeps the level order of its view, so that it runs the
    kernel of every other transposed view (without a C compiler, a built-in one)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _with_ones(sig, x):
    """A dense operand's signature with its dimensions of size 1 added: a kernel compiled
    where such a dimension was broadcast (stretched to another operand's size) runs only
    operands of size 1 there, and one compiled where it was not, only the full size."""
    return sig + (tuple(d for d, n in enumerate(x.shape) if n == 1),)


_SCALAR_OPERAND = ("scalar (0-D) operands are not supported by kernels: give the scalar an "
                   "index of its own, s(k) with a tensor of shape (1,), or scale the "
                   "result (scorch.einsum takes 0-D operands)")


@functools.lru_cache(maxsize=None)
def _dense_kind(ndim, perm):
    """(format tuple, the [None] * ndim level-array list, signature) of a dense operand
    whose levels store dimensions ``perm`` (None: in order); the list is shared and never
    written."""
    if perm is None or perm == tuple(range(ndim)):
        perm = tuple(range(ndim))
        fmt = Format.parse("dense", ndim).as_tuple()
    else:
        fmt = Format("d" * ndim, order=perm).as_tuple()
    return fmt, [None] * ndim, ("d", perm)


# ndim -> signature of a contiguous dense operand of that many dimensions
_DENSE_SIG = {n: _dense_kind(n, None)[2] for n in range(1, _C.MAX_ORDER + 1)}


def _sparse_operand(a: SparseTensor, dtype):
    """(desc, signature).  A SparseTensor's own arrays are described and parsed once per
    tensor and epoch (_C.prepare).  The epoch is read before any array: a copy_ or
    .data = in another thread that replaces them advances it after, so a description
    read from the old arrays is never kept past that."""
    epoch = _C.epoch()
    check_indices(a)
    vals = a._vals
    if vals.dtype is not dtype or not vals.is_contiguous():
        v = vals.detach().to(dtype).contiguous()
        return _sparse_desc(a, v)
    cached = a._desc
    if cached is None or cached[2] != epoch:   # (arrays moved since: retire_prepared)
        desc, sig = _sparse_desc(a, vals)
        # (with the index arrays' checked versions: the extension's hot route,
        # _C.remembered, leaves a call whose arrays were written since to this route)
        cached = a._desc = (_C.prepare(desc, epoch), sig, epoch, index_record(a))
    return cached[0], cached[1]


def retire_prepared():
    """Forget every operand prepared so far (the addresses of its arrays): called where
    torch has moved arrays to shared memory, freeing their old blocks, which every
    SparseTensor sharing them (views, with_values) may have prepared."""
    _C.new_epoch()


def _sparse_desc(a: SparseTensor, vals):
    pos = [None if p is None else p.numpy() for p in a._pos]
    crd = [None if c is None else c.numpy() for c in a._crd]
    fmt = a._format.as_tuple()
    index = _INDEX_NAMES[a.index_dtype]
    # the last two: what an output sharing a's pattern takes (a's own index tensors)
    desc = (a._shape, fmt, pos, crd, vals.detach().numpy(), index, a._pos, a._crd)
    return desc, ("s", fmt, index, _size_class(a._shape, vals.shape[0]))


def _size_class(shape, nnz):
    """What the scheduler's cost model sees of a sparse operand, to the nearest power of
    two: its sizes and stored-entry count.  Part of the kernel-cache key, so a kernel whose
    schedule was chosen for one matrix is not reused for one of a very different size or
    density (correctness never depends on it: any kernel runs any operand of its format)."""
    return tuple(int(n).bit_length() for n in shape) + (int(nnz).bit_length(),)


def _operands(operands):
    """(descriptions, signature tuple: the dtype computed in then one entry per operand,
    the WIDENED dtype the result is narrowed to or None).  The descriptions keep the
    operands' data alive."""
    if not operands:
        raise ValueError("einsum needs at least one operand")
    _unseen_by_kernels(operands)
    dtype = None
    for x in operands:
        if isinstance(x, SparseTensor):
            d = x._vals.dtype
        elif isinstance(x, torch.Tensor) and x.layout is _STRIDED:
            d = x.dtype
        else:
            _bad_operand(operands)
        if d is not dtype:
            dtype = d if dtype is None else torch.promote_types(dtype, d)
    narrow = None
    if dtype in WIDENED:
        narrow, dtype = dtype, WIDENED[dtype]
    elif dtype not in COMPUTE_DTYPES:
        raise TypeError(f"scorch computes in float32, float64, int32 or int64 (bfloat16 "
                        f"and float16 in float32, int16, int8 and uint8 in int32), the "
                        f"operands promote to {dtype}")
    descs, sigs = [], [dtype]
    for x in operands:
        if isinstance(x, SparseTensor):
            d, sig = _sparse_operand(x, dtype)
        else:
            d, sig = _dense_operand(x, dtype)
        descs.append(d)
        sigs.append(sig)
    return descs, tuple(sigs), narrow


_STRIDED = torch.strided
_has_storage = torch._C._has_storage


def _unseen_by_kernels(operands):
    """Refuse operands whose meaning a kernel, which reads their data, would miss: a dual
    tensor of forward-mode AD (its tangent would be dropped) and the tensors without
    storage of a vmap (torch.func's transforms, vmap, jacfwd, and the batched gradients
    of torch.autograd.functional's vectorize=True)."""
    for i, x in enumerate(operands):
        v = x._vals if isinstance(x, SparseTensor) else x
        if not isinstance(v, torch.Tensor):
            continue
        if v.layout is not _STRIDED:   # (a torch sparse tensor has no storage either)
            _bad_operand(operands)
        if not _has_storage(v):
            raise NotImplementedError(
                f"scorch: operand {i} is a batched tensor of vmap (torch.vmap, torch.func's "
                f"jacfwd / jvp / jacrev, or vectorize=True in torch.autograd.functional), "
                f"which scorch's kernels cannot compute; loop over the batch, or use "
                f"torch.autograd.grad / torch.autograd.functional.jacobian without vectorize")
        if _fwad._current_level >= 0 and _fwad.unpack_dual(v).tangent is not None:
            raise NotImplementedError(
                f"scorch: operand {i} is a dual tensor of forward-mode AD "
                f"(torch.autograd.forward_ad), whose tangent scorch's kernels would drop; use "
                f"reverse mode (backward, torch.autograd.grad, "
                f"torch.autograd.functional.jvp)")


def _bad_operand(operands):
    for i, x in enumerate(operands):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"operand {i} must be a torch.Tensor or SparseTensor, not "
                            f"{type(x).__name__}")
        if not isinstance(x, SparseTensor) and x.layout is not torch.strided:
            raise TypeError(f"operand {i} is a {x.layout} tensor; convert it with "
                            "scorch.to_sparse first")


# What _run does with a result, decided once per kernel.  _OUT_SPARSE_CHECKED: a format
# whose COO tail has a unique singleton above its last level ("c(nonunique)ss"), which a
# kernel cannot keep unique: the result is checked, as a conversion into it is.
_OUT_SCALAR, _OUT_DENSE, _OUT_DENSE_PERMUTED, _OUT_SPARSE, _OUT_SPARSE_CHECKED = range(5)


def _run(entry, descs, narrow=None):
    """Run a compiled kernel; the result as a torch.Tensor (dense) or SparseTensor, its
    values narrowed to ``narrow`` (the WIDENED dtype the operands promote to) if given."""
    r = _C.run(entry[0], descs, torch.get_num_threads(), True)
    r = r if type(r) is not tuple else _finish(entry, r)
    if narrow is None:
        return r
    if isinstance(r, SparseTensor):
        return r._rewrap(r._vals.to(narrow))
    return r.to(narrow)


def _finish(entry, raw):
    """The result of a run whose output is not dense in dimension order (the extension
    returns those as a torch.Tensor itself), from its (shape, (pos, crd, vals))."""
    _, how, fmt, index_dtype = entry[:4]
    shape, (pos, crd, vals) = raw
    if how == _OUT_SPARSE:
        return _wrap(shape, fmt, pos, crd, vals, index_dtype)
    if how == _OUT_SPARSE_CHECKED:
        from ._convert import from_components

        r = _wrap(shape, fmt, pos, crd, vals, index_dtype)
        try:
            from_components(tuple(shape), fmt, pos=r._pos, crd=r._crd, values=r._vals)
        except ValueError as e:
            raise NotImplementedError(
                f"the result has two entries with the same coordinates through a unique "
                f"singleton level of its format {fmt} ({e}); make that level nonunique, "
                f"as coo's are") from None
        return r
    if how == _OUT_SCALAR:
        return _torch(vals).reshape(())
    order = fmt.order
    inv = [0] * len(order)
    for k, d in enumerate(order):
        inv[d] = k
    return _torch(vals).reshape([shape[d] for d in order]).permute(inv)


def _out_kind(fmt) -> int:
    if fmt is None or not fmt.kinds:
        return _OUT_SCALAR
    if any(fmt.kinds):
        inner = range(len(fmt.kinds) - 1)
        if any(fmt.kinds[k] == 2 and fmt.unique[k] for k in inner):   # (a singleton's)
            return _OUT_SPARSE_CHECKED
        return _OUT_SPARSE
    return _OUT_DENSE if fmt.order == tuple(range(len(fmt.order))) else _OUT_DENSE_PERMUTED


def _output_order(lang, expr: str) -> int:
    """Number of output dimensions the expression declares (malformed text is left to the
    compiler's parser, which reports the column)."""
    if lang == _LANG_EINSUM:
        if "->" in expr:
            return sum(ch.isalpha() for ch in expr.split("->", 1)[1])
        letters = [ch for ch in expr if ch.isalpha()]
        return sum(letters.count(ch) == 1 for ch in set(letters))
    lhs = expr.split("=", 1)[0]
    if "(" not in lhs:
        return 0
    inside = lhs[lhs.index("(") + 1:lhs.rindex(")") if ")" in lhs else len(lhs)]
    return len([t for t in inside.split(",") if t.strip()])


# (lang, expr, operand signatures (a sparse operand's includes its _size_class), out
# format, schedule) -> the kernel's entry (_entry_of): a warm call skips the C compiler's
# lookup and the description of the result.
_KERNELS: dict = {}
_SIZES: dict = {}   # key -> how many kernels written for sizes it has (_entry)


def _compile(lang, expr, operands, out_format, schedule, pretranspose=True):
    """(kernel entry, operand descriptions, the WIDENED dtype the result is narrowed to or
    None): ``_run``'s arguments.

    Where the kernel would transpose a sparse operand before every run, the operand is
    transposed here instead, once (``_transposed`` keeps the copy on the operand), and
    the entry returned is that of the kernel compiled for the transposed copy (with the
    same output format).  A dense operand the kernel relays out is left to the C driver,
    which copies it before every run (a dense tensor has no reliable sign of change: a
    write through ``.data`` leaves its version counter alone, so a kept copy could go
    stale; and the driver's tiled, threaded copy into its own allocation ran 2x faster
    than torch's copy into a fresh tensor).  ``pretranspose=False`` gives the kernel as
    asked (explain)."""
    if not isinstance(expr, str):
        raise TypeError(f"the expression must be a str, not {type(expr).__name__}")
    if not operands:
        raise ValueError(f"{expr!r} has no operand tensor: a kernel computes over at least "
                         f"one (a constant alone is no kernel)")
    descs, sigs, narrow = _operands(operands)
    sched = _schedule_text(schedule)
    key, entry = _entry(lang, expr, (lang, expr, sigs, _out_key(out_format), sched), operands,
                        descs, out_format, sched)
    if not pretranspose or not _sparse_moves(entry, operands):
        return entry, descs, narrow
    ops, pre_descs, pre_sigs = list(operands), list(descs), list(sigs)
    out = entry[2] if out_format is None else out_format
    ran = descs
    # (a copy can change the order the copies' kernel takes, and that order can ask for
    # another copy)
    for _ in range(len(operands)):
        for t, fmt in _sparse_moves(entry, ops):
            ops[t] = _transposed(ops[t], fmt)
            pre_descs[t], pre_sigs[t + 1] = _sparse_operand(ops[t], sigs[0])
        pre_key = (lang, expr, tuple(pre_sigs), _out_key(out), sched)
        try:
            _, pre = _entry(lang, expr, pre_key, ops, pre_descs, out, sched)
        except Exception:   # then the kernel transposes on every run, as it was compiled
            if ran is descs:
                _KERNELS[key] = entry[:4] + ((),) + entry[5:]
            return entry, ran, narrow
        entry, ran = pre, list(pre_descs)
        if not _sparse_moves(entry, ops):
            break
    return entry, ran, narrow


def _sparse_moves(entry, operands):
    """The (operand, Format) conversions of a kernel entry that are the Python layer's to
    make: those of SparseTensor operands."""
    return [(t, f) for t, f in entry[4] if isinstance(operands[t], SparseTensor)]


_SIZED = 4   # kernels written for sizes, per signature; further sizes share a generic one


def wait_compiles():
    """Wait for every background compile (a kernel written for its call's sizes while a
    generic built-in one stands in) and swap its kernel in: what a benchmark calls before
    timing the kernels a long-running program settles on.  Returns how many there were."""
    n = 0
    for key, entry in list(_KERNELS.items()):
        if entry[6] is not None:
            _swap_in(key, entry, True)
            n += 1
    return n


@atexit.register
def _publish_compiles(limit=20.0):
    """At exit, wait (up to ``limit`` seconds) for the background compiles still running,
    which publish their kernels in the cache when they end: an interpreter that exits
    first leaves the compiler running as an orphan, its temporary files behind and its
    kernel unpublished, so that a short script compiled it again at every start."""
    deadline = time.monotonic() + limit
    pending = [e[6] for e in list(_KERNELS.values()) if e[6] is not None]
    while pending and time.monotonic() < deadline:
        pending = [later for later in pending if _still_compiling(later)]
        if pending:
            time.sleep(0.005)


def _still_compiling(later):
    try:
        return _C.later_poll(later, False) is None
    except Exception:   # (failed: nothing to publish)
        return False


def _entry(lang, expr, key, operands, descs, out_format, sched):
    """(key, entry) of the kernel for key, compiled on a miss.  A kernel written for the
    sizes of a dense-only index (SDDMM's and SpMM's K: _C.kernel_fixed) that these
    operands do not have gives way to the one for theirs, under the key with those sizes
    added; past _SIZED such kernels for one key (a batch size that keeps changing), to
    one generic in every size."""
    entry = _KERNELS.get(key)
    if entry is None:
        entry = _KERNELS[key] = _new_entry(lang, expr, descs, out_format, sched)
    if entry[6] is not None:
        entry = _swap_in(key, entry)
    if entry[5] and not _fits(entry[5], operands):
        sized = key + (tuple(_size(operands[t], d) for t, d, _ in entry[5]),)
        hit = _KERNELS.get(sized)
        if hit is not None and hit[6] is not None:
            hit = _swap_in(sized, hit)
        if hit is not None and not _fits(hit[5], operands):
            # written for more sizes than the key names (an extent fixed for some sizes
            # and not for others: an all-dense operand's, with K = 0): the generic one
            sized = key + ("any",)
            hit = _KERNELS.get(sized)
            if hit is None:
                hit = _KERNELS[sized] = _new_entry(lang, expr, descs, out_format, sched,
                                                   False)
        if hit is None:
            n = _SIZES.get(key, 1)
            if n >= _SIZED:
                sized = key + ("any",)
                hit = _KERNELS.get(sized)
            if hit is None:
                hit = _KERNELS[sized] = _new_entry(lang, expr, descs, out_format, sched,
                                                   n < _SIZED)
                _SIZES[key] = n + 1
        key, entry = sized, hit
    return key, entry


def _out_key(out_format):
    if out_format is None or isinstance(out_format, str):
        return out_format
    if not isinstance(out_format, Format):
        raise TypeError(f"out_format must be a str or scorch.Format, not "
                        f"{type(out_format).__name__}")
    return out_format.as_tuple()


def _new_entry(lang, expr, descs, out_format, sched, sizes=True):
    fmt_t = None
    order = _output_order(lang, expr) if out_format is not None else None
    if order == 0 and out_format != "dense":
        raise ValueError(f"the expression's output is a scalar: out_format={out_format!r} "
                         "does not apply (None or 'dense')")
    if order:   # (a scalar output is dense: "dense" asks for what it is)
        fmt_t = Format.parse(out_format, order).as_tuple()
    kernel, later = _C.compile(lang, expr, descs, fmt_t, sched, sizes, True)
    return _entry_of(kernel, later)


def _entry_of(kernel, later=None):
    """A kernel's entry: (kernel, what _run does with its result, out Format, index
    dtype, its transposes, its fixed sizes, the kernel for the operands' sizes compiling
    in the background while this one (ahead of time, generic in every size) runs, or
    None: _C.compile with later)."""
    _, out_fmt_t, _, index_name, _, text = _C.kernel_info(kernel)
    out_fmt = _format_from_tuple(*out_fmt_t) if out_fmt_t[0] else None
    return (kernel, _out_kind(out_fmt), out_fmt, _INDEX_OF_NAME[index_name],
            _transposes(text), _C.kernel_fixed(kernel), later)


def _swap_in(key, entry, wait=False):
    """entry, or where its background compile has finished (wait: once it has), the entry
    of the kernel it compiled (kept under key from then on).  A compile that failed (no C
    compiler) leaves the generic kernel in place for good."""
    try:
        kernel = _C.later_poll(entry[6], wait)
    except Exception:
        kernel = False
    if kernel is None:
        return entry
    entry = _entry_of(kernel) if kernel else entry[:6] + (None,)
    _KERNELS[key] = entry
    return entry


def _size(x, d):
    return x._shape[d] if isinstance(x, SparseTensor) else x.shape[d]


def _fits(fixed, operands):
    """Whether the operands have the sizes a kernel was written for ((operand, dim, size),
    ...: _C.kernel_fixed)."""
    return all(_size(operands[t], d) == n for t, d, n in fixed)


_TRANSPOSED = re.compile(r"  (?:transposed|converted) before running to (?:\S+ = )?(\S+) "
                         r"\(([\d,]+)\)")


def _transposes(explain: str):
    """((operand index, Format), ...) for the operands the kernel transposes before each
    run, read from its explanation (one "operand" line each, in order, followed by a
    "transposed before running to <format>" line for those it transposes)."""
    out = []
    for t, lines in enumerate(_operand_lines(explain)):
        for line in lines[1:]:
            m = _TRANSPOSED.match(line)
            if m:
                order = tuple(int(d) for d in m.group(2).split(","))
                out.append((t, Format(m.group(1), order=order)))
    return tuple(out)


def _operand_lines(explain: str):
    """[[operand line, its following indented lines], ...] of an explanation."""
    out = []
    for line in explain.splitlines():
        if line.startswith("operand "):
            out.append([line])
        elif line.startswith("output "):
            break
        elif out and line.startswith("  "):
            out[-1].append(line)
    return out


def _transposed(a: SparseTensor, fmt: Format) -> SparseTensor:
    """``a`` converted to ``fmt`` as the kernel would (explicit zeros and index width
    kept), remembered on ``a`` until its values change in place (their version).  A new
    tensor on a pattern already converted (``with_values``, dropout on the values: a
    training loop's every step) gets its copy by gathering its values in the order the
    pattern's conversion left (``_moved``), not by another conversion.  The copy of a
    bfloat16 / float16 tensor holds float32 values, what the kernels compute in: a
    conversion that sums repeated coordinates sums them before any rounding.  A tensor
    whose ``_transposed`` is False keeps no copy: its values' version does not follow
    every write (the values of a torch CSR/CSC tensor built over a Parameter), and
    neither do values that require grad (a fused optimizer's step writes a Parameter in
    place without a version bump, vector_to_parameters swaps its .data) or live in shared
    memory (another process writes them: Hogwild): those are gathered again each call."""
    cache = a._transposed
    v = a._vals
    if cache is False or v.is_inference() or v.requires_grad or v.is_shared():
        return _moved(a, fmt)   # (a view of a torch CSR/CSC tensor: _dispatch._to_scorch;
        # values made in inference mode, which torch counts no versions of)
    arrays = (a._vals, a._pos, a._crd)   # (the copy serves these very arrays only:
    version = arrays[0]._version         # another thread may be replacing them)
    hit = cache.get(fmt) if cache is not None else None
    if hit is not None and hit[0] == version and all(x is y for x, y in zip(hit[2], arrays)):
        check_indices(a)   # (a copy made before an index array was written: not served;
        return hit[1]      # every other route here was checked by _operands already)
    t = _moved(a, fmt)
    if cache is None:
        cache = a._transposed = {}
    cache[fmt] = (version, t, arrays)
    return t


# id(a pattern's last crd array) -> (weak references to all its pos and crd arrays, their
# versions, {(source Format, shape, target Format): (pos, crd, source position of each
# entry) or None where the conversion merges entries}); an entry leaves with that array,
# and an array written in place (load_state_dict writes SparseLinear's buffers so) makes
# another pattern.  (Arrays
# from from_components may be shared between patterns, and a transposed view (A.t())
# shares A's arrays under another level order and shape: a record serves only the very
# arrays, read the very way, it was made from.)
_PATTERNS: dict = {}


def _moved(a: SparseTensor, fmt: Format) -> SparseTensor:
    if a.dtype in WIDENED:   # (the kernels' copy is in their dtype: duplicates summed there)
        a = a._rewrap(a._vals.detach().to(WIDENED[a.dtype]))
    arrays = [x for x in a._pos + a._crd if x is not None]
    key = next((c for c in reversed(a._crd) if c is not None), None)
    if key is None:
        return a.to_format(fmt, a.index_dtype, drop_zeros=False)
    if any(x.is_inference() for x in arrays):   # (no versions to keep a record by)
        return a.to_format(fmt, a.index_dtype, drop_zeros=False)
    slot = _PATTERNS.get(id(key))
    versions = [x._version for x in arrays]
    if slot is None or len(slot[0]) != len(arrays) or slot[1] != versions or any(
            r() is not x for r, x in zip(slot[0], arrays)):
        if slot is None:
            weakref.finalize(key, _PATTERNS.pop, id(key), None)
        slot = _PATTERNS[id(key)] = ([weakref.ref(x) for x in arrays], versions, {})
    moves, how = slot[2], (a._format, a._shape, fmt)
    if how not in moves:
        # the conversion of the entries' own positions (exact in float64) says where each
        # entry goes; one that sums repeated coordinates (COO to DCSR) has fewer entries
        ids = a._rewrap(torch.arange(a.nnz, dtype=torch.float64))
        c = ids.to_format(fmt, a.index_dtype, drop_zeros=False)
        moves[how] = (c._pos, c._crd, c._vals.to(torch.int64)) if c.nnz == a.nnz else None
    if moves[how] is None:
        return a.to_format(fmt, a.index_dtype, drop_zeros=False)
    pos, crd, perm = moves[how]
    vals = a._vals.detach().index_select(0, perm)   # (index_select: 3x [perm]'s speed)
    return SparseTensor(a._shape, fmt, pos, crd, vals, index_dtype=a.index_dtype, checked=True)


def einsum(expr: str, *operands, out_format=None, schedule=None):
    """One compiled kernel for an einsum expression, recording no autograd: what
    scorch.einsum (scorch._torch_ops.einsum) and the backward kernels run."""
    return _einsum_run(expr, operands, out_format, schedule)


def _einsum_run(expr, operands, out_format=None, schedule=None):
    """einsum with the operands as a sequence (the form scorch's own callers have)."""
    if out_format is None and schedule is None:
        return _remembered_run(expr, _LANG_EINSUM, expr, operands, None, None)
    return _run(*_compile(_LANG_EINSUM, expr, operands, out_format, schedule))


_REMEMBERED = 16   # kernels a SparseTensor remembers (einsum texts, Kernel objects)


def _remembered_run(key, lang, expr, operands, out_format, schedule):
    """Run ``expr`` over ``operands``.  A SparseTensor first operand followed by plain
    tensors remembers the kernel its last call under ``key`` ran (``_kernels``), and the
    next call runs it in the extension (``_C.remembered``, see ``remembered``) without
    building the signature and cache key again: on a cold cache (after other work has
    swept it) those Python steps cost ~30 us, more than a small kernel.  Where the
    extension finds no such kernel or an operand it does not fit (a dtype to promote, a
    strided view, other fixed sizes) the general route runs instead."""
    r = remembered(key, operands)
    if r is not None:
        return r
    entry, descs, narrow = _compile(lang, expr, operands, out_format, schedule)
    if narrow is not None:   # (the hot route runs no WIDENED dtype: nothing to remember)
        return _run(entry, descs, narrow)
    a = operands[0] if operands else None
    if (type(a) is SparseTensor and entry[6] is None and
            all(type(x) is torch.Tensor and d is x for x, d in zip(operands[1:], descs[1:]))):
        if a._desc is not None and descs[0] is a._desc[0]:
            hit = (len(operands), entry)
        else:   # the kernel reads a converted copy of a (_transposed): while it is valid
            hit = next(((len(operands), entry, c._desc[0], version, arrays[0],
                         index_record(a))
                        for version, c, arrays in (a._transposed or {}).values()
                        if c._desc is not None and descs[0] is c._desc[0]), None)
        if hit is not None:
            memo = a._kernels
            if memo is None or len(memo) >= _REMEMBERED:
                memo = a._kernels = {}
            memo[key] = hit
    return _run(entry, descs)


def remembered(key, operands):
    """What the kernel ``operands[0]`` remembers under ``key`` gives on ``operands``, run
    by the extension with no Python step (autograd not recording, plain dense operands
    it takes as they are); None where the general route must run the call.  The hot
    route of scorch.einsum, the torch products and scorch.kernel."""
    if _fwad._current_level >= 0:
        _unseen_by_kernels(operands)
    r = _C.remembered(key, operands)
    if type(r) is not tuple:
        return r
    entry, (shape, (pos, crd, vals)) = r
    if entry[1] == _OUT_SPARSE and type(vals) is torch.Tensor:
        # (_finish's sparse case without its two calls: on a cold cache, after other
        # work has swept it, each Python call costs 2-3 us of a small SDDMM's ~65)
        return SparseTensor(shape, entry[2], pos, crd, vals, index_dtype=entry[3], checked=True)
    return _finish(*r)


class Kernel:
    """A compiled expression in index notation, reusable across calls:

        k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense")
        C = k(A, X)

    Operands are passed in the order their names first appear on the right-hand side.
    Declared formats are checked on every call.
    """

    def __init__(self, notation: str, out_format=None, schedule=None, **formats):
        if not isinstance(notation, str):
            raise TypeError(f"the expression must be a str, not {type(notation).__name__}")
        self.notation = notation
        self.formats = dict(formats)
        _out_key(out_format)   # (checks its type)
        self.out_format = out_format
        self.schedule = _schedule_text(schedule)
        self._parsed = {}  # (declared format, ndim) -> Format: parsed once, not per call
        self._names = _operand_names(notation)
        unknown = [k for k in self.formats if k not in self._names]
        if unknown and self._names:
            raise ValueError(f"formats declared for {', '.join(unknown)}, which "
                             f"{notation!r} does not read (its operands: "
                             f"{', '.join(self._names)})")

    def _check(self, operands):
        for name, x in zip(self._names, operands):
            if name not in self.formats:
                continue
            want = self.formats[name]
            if want in ("dense", None):
                if isinstance(x, SparseTensor):
                    raise TypeError(f"operand {name} was declared dense but is a "
                                    f"SparseTensor ({x.format})")
                continue
            if not isinstance(x, SparseTensor):
                raise TypeError(f"operand {name} was declared {want} but is dense")
            fmt = x._format
            key = (want, len(fmt.kinds))
            parsed = self._parsed.get(key) if isinstance(want, (str, Format)) else None
            if parsed is None:   # (Format.parse refuses a declaration of another type)
                parsed = self._parsed[key] = Format.parse(want, len(fmt.kinds))
            if fmt != parsed:
                raise ValueError(f"operand {name} was declared {want} but is {x.format}")

    def __call__(self, *operands):
        if _compiling():   # (torch.compile tracing: the call runs outside its graph)
            return outside(Kernel.__call__)(self, *operands)
        self._check(operands)
        key = (_LANG_INDEX, self.notation, _out_key(self.out_format), self.schedule)
        r = remembered(key, operands)   # (the hot route: None where autograd would record)
        if r is not None:
            return r
        if torch.is_grad_enabled():
            for name, x in zip(self._names or [None] * len(operands), operands):
                v = x._vals if isinstance(x, SparseTensor) else x
                if isinstance(v, torch.Tensor) and v.requires_grad:
                    raise RuntimeError(
                        f"scorch.kernel computes without autograd, and operand "
                        f"{name or ''} requires grad (its gradient would be lost): use "
                        f"scorch.einsum or torch ops, which record, or call the kernel "
                        f"under torch.no_grad()")
        return _remembered_run(key, _LANG_INDEX, self.notation, operands, self.out_format,
                               self.schedule)

    def explain(self, *operands) -> str:
        """The kernel's text for these operands (checked as a call checks them)."""
        self(*(x.detach() if isinstance(x, torch.Tensor) else x for x in operands))
        return _explain(_LANG_INDEX, self.notation, operands, self.out_format, self.schedule)

    def __repr__(self):
        fm = ", ".join(f"{k}={v!r}" for k, v in self.formats.items())
        return f"scorch.kernel({self.notation!r}{', ' if fm else ''}{fm})"


_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|([0-9.][0-9.eE+-]*)|(.))")


def _operand_names(notation: str) -> list:
    """The operands' names on the right-hand side of index notation, in order of first
    appearance (the order a Kernel takes them in); [] where it has no '='."""
    if "=" not in notation:
        return []
    tokens = [(m.group(1), m.group(3)) for m in _TOKEN.finditer(notation.split("=", 1)[1])
              if m.group(0).strip()]
    names, k = [], 0
    while k < len(tokens):
        name = tokens[k][0]
        k += 1
        if name is None:
            continue
        if name not in names:
            names.append(name)
        if k < len(tokens) and tokens[k][1] == "(":   # (its indices, up to the ')')
            while k < len(tokens) and tokens[k][1] != ")":
                k += 1
    return names


def kernel(notation: str, out_format=None, schedule=None, **formats) -> Kernel:
    """Compile-once, call-many: see ``Kernel``."""
    return Kernel(notation, out_format=out_format, schedule=schedule, **formats)


_TORCH_EXPR = {
    "mm": "ij,jk->ik",
    "mv": "ij,j->i",
    "bmm": "bij,bjk->bik",
}


@outside_graph
def explain(fn, *operands, out_format=None, schedule=None) -> str:
    """What scorch compiles for ``fn(*operands)``: the expression, operand and output
    formats, the loop order, the schedule and the generated C.  ``fn`` is an einsum string
    or one of torch.mm / torch.mv / torch.bmm / torch.matmul (of two matrices, a matrix and
    a vector, or two 3-D batches).  The operands are checked as the call checks them (sizes that
    disagree raise its error)."""
    if isinstance(fn, str):   # (the equation einsum compiles: '...' spelled, diagonals taken)
        from ._torch_ops import as_compiled

        with torch.no_grad():   # (the call's own checks: a kernel cached for other sizes
            from ._torch_ops import einsum   # would not make them)
            einsum(fn, *operands, out_format=out_format, schedule=schedule)
        expr, operands = as_compiled(fn, operands)
    else:
        name = getattr(fn, "__name__", "")
        if name == "matmul" and len(operands) == 2:
            name = {(2, 2): "mm", (2, 1): "mv", (3, 3): "bmm"}.get(
                (operands[0].dim(), operands[1].dim()), name)
        if name not in _TORCH_EXPR:
            raise NotImplementedError(
                f"scorch.explain does not know {fn!r} of these operands (it knows torch.mm, "
                f"torch.mv, torch.bmm, and torch.matmul of two matrices, a matrix and a "
                f"vector, or two 3-D batches); pass an einsum string")
        expr = _TORCH_EXPR[name]
        with torch.no_grad():
            fn(*operands)
    return _explain(_LANG_EINSUM, expr, operands, out_format, schedule)


def _explain(lang, expr, operands, out_format, schedule) -> str:
    """The explanation of the kernel a call runs.  Where the kernel as asked would
    transpose a sparse operand on every run, the call transposes it once and runs the
    kernel compiled for that copy (``_compile``), whose loop order and schedule can differ:
    the text is that kernel's, with each operand it reads as a copy shown as given,
    followed by the line saying where it went.  (Like the call, this makes the copy, kept
    on the operand.)"""
    asked = _compile(lang, expr, operands, out_format, schedule, False)[0]
    ran = _compile(lang, expr, operands, out_format, schedule)[0]
    text = _with_counts(_C.kernel_info(ran[0])[5], operands)
    if ran is asked:
        return text
    given = _operand_lines(_with_counts(_C.kernel_info(asked[0])[5], operands))
    lines, t = [], -1
    for line in text.splitlines():
        if line.startswith("operand ") and t + 1 < len(given):
            t += 1
            if line != given[t][0]:            # the kernel reads a copy
                moved = given[t][1:] or [f"  transposed before running to "
                                         f"{_format_text(line)}"]
                lines.append(given[t][0])
                lines.extend(moved)
                lines[-1] += (", once: the copy is kept on the tensor while its values are "
                              "unchanged, and the kernel below reads it")
                continue
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _with_counts(text: str, operands) -> str:
    """A kernel's text with its operand lines' entry counts those of ``operands``: the
    text is kept per kernel, which serves operands of other sizes too."""
    lines, t = text.split("\n"), 0
    for k, line in enumerate(lines):
        if line.startswith("operand ") and t < len(operands):
            x = operands[t]
            n = x.nnz if isinstance(x, SparseTensor) else x.numel()
            lines[k] = re.sub(r"nnz \d+", f"nnz {n}", line)
            t += 1
    return "\n".join(lines)


def _format_text(operand_line: str) -> str:
    """"csr = dc (0,1)" from "operand A: csr = dc (0,1), float32, ..." """
    return operand_line.split(": ", 1)[1].split(", ", 1)[0]
