"""Entry points that make SparseTensors: to_sparse, from_edge_index, from_components.

Every input is checked here (type, device, dtype, shape) and the arrays' contents by the C
core; the caller's tensors and arrays are never written.
"""
from __future__ import annotations

import operator

import numpy as np
import torch

from . import _C
from ._format import Format
from ._tensor import (_INDEX_NAMES, VALUE_DTYPE_NAMES, VALUE_DTYPES, SparseTensor,
                      _resolve_index_dtype, _threads, _wrap, c_values, outside_graph)


def _check_cpu(t: torch.Tensor, what: str):
    if t.device.type != "cpu":
        raise ValueError(f"scorch tensors live on the CPU; {what} is on {t.device} "
                         f"(move it with .cpu())")


def _check_values_dtype(dtype, what="values"):
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"scorch supports {VALUE_DTYPE_NAMES} {what}, got {dtype} "
                        f"(convert with .float() or .double())")


def _size(s, what) -> int:
    """s as an int size: an int, a NumPy integer or an integer 0-D tensor (2.9 is refused,
    as torch.zeros((2.9, 3)) refuses it)."""
    try:
        return operator.index(s)
    except TypeError:
        raise TypeError(f"{what}: {s!r} is not an integer") from None


def _from_coords(shape, coords: torch.Tensor, values: torch.Tensor, fmt, index_dtype,
                 drop_zeros=False, is_sorted=False) -> SparseTensor:
    """coords: integer tensor [ndim, nnz] (any order, duplicates summed); ``is_sorted``
    says they are in row-major order without duplicates (checked)."""
    shape = tuple(int(s) for s in shape)
    fmt = Format.parse(fmt, len(shape))
    it = _resolve_index_dtype(index_dtype, shape, coords.shape[1])
    coords = coords.detach().to(torch.int64).contiguous()
    p, c, v = _C.from_coords(shape, coords.numpy(), c_values(values),
                             fmt.as_tuple(), _INDEX_NAMES[it],
                             int(bool(drop_zeros)) | 2 * int(is_sorted), _threads())
    out = _wrap(shape, fmt, p, c, v, it, values.dtype)
    if values.requires_grad and torch.is_grad_enabled():
        from ._torch_ops import summed_onto   # (differentiable w.r.t. values)

        out = summed_onto(out, list(coords), values)
    return out


@outside_graph
def to_sparse(x, format="csr", index_dtype=None) -> SparseTensor:
    """Convert ``x`` to a scorch SparseTensor in ``format`` (a name such as "csr", a level
    string such as "dc", or a ``scorch.Format``).

    ``x`` may be a dense torch.Tensor (zeros are not stored), a torch sparse tensor (COO,
    CSR, CSC, BSR or BSC), a SparseTensor, a scipy.sparse matrix or array, or a NumPy array.
    Duplicates are summed; explicit zeros in sparse inputs are kept.  ``index_dtype`` is
    torch.int32 (the default when sizes fit) or torch.int64.
    """
    if isinstance(x, SparseTensor):
        return x.to_format(format, index_dtype)
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if isinstance(x, torch.Tensor):
        _check_cpu(x, "the input")
        if x.layout is torch.strided:
            return _from_dense(x, format, index_dtype)
        return _from_torch_sparse(x, format, index_dtype)
    if _is_scipy_sparse(x):
        return _from_scipy(x, format, index_dtype)
    raise TypeError("to_sparse expects a torch.Tensor, a scipy.sparse matrix/array or a "
                    f"NumPy array, not {type(x).__name__}")


def _from_dense(x: torch.Tensor, format, index_dtype) -> SparseTensor:
    _check_values_dtype(x.dtype)
    fmt = Format.parse(format, x.dim())
    bound = x.numel() if x.numel() <= 2**31 - 1 else int(torch.count_nonzero(x))
    it = _resolve_index_dtype(index_dtype, x.shape, bound)
    p, c, v = _C.from_dense(c_values(x), fmt.as_tuple(), _INDEX_NAMES[it], _threads())
    out = _wrap(x.shape, fmt, p, c, v, it, x.dtype)
    if x.requires_grad and torch.is_grad_enabled():
        # Differentiable w.r.t. x: the values gathered from x at the stored coordinates.
        from ._torch_ops import dim_coords

        vals = x[tuple(dim_coords(out))]
        out = out._rewrap(vals, requires_grad=True)
    return out


def _from_torch_sparse(x: torch.Tensor, format, index_dtype) -> SparseTensor:
    _check_values_dtype(x.dtype)
    layout = x.layout
    if layout is torch.sparse_coo:
        if x.dense_dim() != 0:
            raise NotImplementedError("hybrid COO tensors (with dense dimensions) are not "
                                      "supported; use .to_dense() first")
        if x.requires_grad:   # (_values() is outside autograd; values() of a coalesced one)
            x = x.coalesce()
        vals = x.values() if x.requires_grad else x._values()
        return _from_coords(x.shape, x._indices(), vals, format, index_dtype,
                            is_sorted=x.is_coalesced())
    if x.dim() != 2:
        raise NotImplementedError(f"batched {layout} tensors are not supported")
    if layout in (torch.sparse_csr, torch.sparse_csc):
        compressed = x.crow_indices() if layout is torch.sparse_csr else x.ccol_indices()
        plain = x.col_indices() if layout is torch.sparse_csr else x.row_indices()
        if x.values().dim() != 1:
            raise NotImplementedError("hybrid CSR/CSC tensors are not supported")
        _check_compressed(layout, compressed, x.shape[0 if layout is torch.sparse_csr else 1],
                          plain.numel(), x.values().shape[0])
        from ._torch_ops import repeated   # (torch's opens a parallel region per call)

        outer = repeated(torch.arange(compressed.numel() - 1, dtype=torch.int64),
                         compressed.diff())
        coords = (torch.stack([outer, plain.to(torch.int64)]) if layout is torch.sparse_csr
                  else torch.stack([plain.to(torch.int64), outer]))
        return _from_coords(x.shape, coords, x.values(), format, index_dtype,
                            is_sorted=False)
    if layout in (torch.sparse_bsr, torch.sparse_bsc):
        bsr = layout is torch.sparse_bsr
        ptr, idx = (x.crow_indices(), x.col_indices()) if bsr else \
            (x.ccol_indices(), x.row_indices())
        blocks = x.values()
        if blocks.dim() != 3:
            raise NotImplementedError(f"hybrid {layout} tensors are not supported")
        bh, bw = blocks.shape[1], blocks.shape[2]
        _check_compressed(layout, ptr, x.shape[0] // max(bh, 1) if bsr else
                          x.shape[1] // max(bw, 1), idx.numel(), blocks.shape[0])
        from ._torch_ops import repeated

        outer = repeated(torch.arange(ptr.numel() - 1), ptr.diff())
        brow, col = (outer, idx) if bsr else (idx.to(torch.int64), outer)
        ii = torch.arange(bh).view(1, bh, 1)
        jj = torch.arange(bw).view(1, 1, bw)
        rows = (brow.view(-1, 1, 1) * bh + ii).expand(-1, bh, bw).reshape(-1)
        cols = (col.to(torch.int64).view(-1, 1, 1) * bw + jj).expand(-1, bh, bw).reshape(-1)
        # Zeros inside blocks are padding, like a dense level's: not stored.
        return _from_coords(x.shape, torch.stack([rows, cols]), blocks.reshape(-1), format,
                            index_dtype, drop_zeros=True)
    raise NotImplementedError(f"torch layout {layout} is not supported by to_sparse")


def _check_compressed(layout, compressed, outer, nplain, nvals):
    """A torch compressed tensor's arrays, checked as from_components checks a compressed
    level (torch builds them unchecked unless asked): one position per outer index and
    one more, from 0, non-decreasing, ending at the number of entries."""
    name = "ccol_indices" if layout in (torch.sparse_csc, torch.sparse_bsc) else "crow_indices"
    if compressed.numel() != outer + 1:
        raise ValueError(f"a {layout} tensor: {name} has {compressed.numel()} entries, "
                         f"expected {outer + 1}")
    if nplain != nvals:
        raise ValueError(f"a {layout} tensor: {nplain} indices but {nvals} values")
    c = compressed.to(torch.int64)
    if c[0] != 0 or c[-1] != nplain or (c.diff() < 0).any():
        raise ValueError(f"a {layout} tensor: {name} must start at 0, never decrease "
                         f"and end at the number of entries ({nplain})")


def _is_scipy_sparse(x) -> bool:
    mod = type(x).__module__ or ""
    if not mod.startswith("scipy.sparse"):
        return False
    import scipy.sparse as sp

    return sp.issparse(x)


def _from_scipy(x, format, index_dtype) -> SparseTensor:
    if x.dtype not in (np.float32, np.float64, np.int64, np.int32, np.int16, np.int8, np.uint8):
        raise TypeError(f"scorch reads float32, float64, int64, int32, int16, int8 and uint8 "
                        f"scipy values, got "
                        f"{x.dtype} (convert with .astype(numpy.float32))")
    coo = x.tocoo()
    coords = np.stack([np.asarray(c, dtype=np.int64) for c in coo.coords]) \
        if hasattr(coo, "coords") else np.stack([coo.row, coo.col]).astype(np.int64)
    return _from_coords(x.shape, torch.from_numpy(coords), torch.from_numpy(coo.data),
                        format, index_dtype)


@outside_graph
def from_edge_index(edge_index, num_nodes=None, values=None, format="csr",
                    index_dtype=None) -> SparseTensor:
    """The num_nodes x num_nodes adjacency matrix of a PyG-style ``edge_index`` (a [2, E]
    integer tensor: row = edge_index[0], column = edge_index[1]).  ``values`` defaults to
    ones (float32); repeated edges are summed."""
    if not isinstance(edge_index, torch.Tensor):
        edge_index = torch.as_tensor(edge_index)
    _check_cpu(edge_index, "edge_index")
    if edge_index.dtype.is_floating_point or edge_index.dtype.is_complex or \
            edge_index.dtype is torch.bool:
        raise TypeError(f"edge_index must be an integer tensor, got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}")
    E = edge_index.shape[1]
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if E else 0
    num_nodes = _size(num_nodes, "num_nodes")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    if values is None:
        values = torch.ones(E, dtype=torch.float32)
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor, not {type(values).__name__}")
    _check_strided(values, "values")
    _check_cpu(values, "values")
    _check_values_dtype(values.dtype)
    if values.shape != (E,):
        raise ValueError(f"values must have shape [{E}] (one per edge), got "
                         f"{list(values.shape)}")
    return _from_coords((num_nodes, num_nodes), edge_index, values, format, index_dtype)


def _check_strided(arr, name):
    """An array of from_components is a plain dense tensor (a sparse one, torch's or
    scorch's, has no array to read)."""
    if type(arr) is SparseTensor or arr.layout is not torch.strided:
        kind = "a scorch.SparseTensor" if type(arr) is SparseTensor else f"{arr.layout}"
        raise TypeError(f"{name} must be a dense (strided) tensor, got {kind}")


@outside_graph
def from_components(shape, format, *, pos=None, crd=None, values) -> SparseTensor:
    """A SparseTensor from level arrays you already hold, checked in O(nnz).

    ``pos`` and ``crd`` are lists with one entry per level (None where the level kind has
    no such array: dense levels have neither, singleton levels only crd); all index arrays
    share one dtype (int32 or int64).  The arrays are used as they are, without copying
    (like torch.sparse_csr_tensor); scorch never writes to them.

    Example (CSR)::

        scorch.from_components((2, 3), "csr", pos=[None, rowptr], crd=[None, cols],
                               values=vals)
    """
    if not isinstance(shape, (tuple, list, torch.Size)):
        raise TypeError(f"shape must be a tuple of ints, not {type(shape).__name__}")
    shape = tuple(_size(s, "shape") for s in shape)
    for d, s in enumerate(shape):
        if s < 0:
            raise ValueError(f"shape has a negative size {s} in dimension {d}")
        if s > 2 ** 63 - 1:
            raise ValueError(f"shape has a size {s} in dimension {d}, past 2^63 - 1 (the "
                             f"largest a torch tensor's dimension can be)")
    fmt = Format.parse(format, len(shape))
    n = fmt.ndim
    pos = [None] * n if pos is None else list(pos)
    crd = [None] * n if crd is None else list(crd)
    if len(pos) != n or len(crd) != n:
        raise ValueError(f"pos and crd need one entry per level ({n}), got {len(pos)} and "
                         f"{len(crd)}")
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor, not {type(values).__name__}")
    _check_strided(values, "values")
    _check_cpu(values, "values")
    _check_values_dtype(values.dtype)
    if values.dim() != 1:
        raise ValueError(f"values must be 1-D, got shape {list(values.shape)}")
    idx_dtype = None
    for k, (kind, p, c) in enumerate(zip(fmt.levels, pos, crd)):
        for name, arr, needed in (("pos", p, kind == "compressed"),
                                  ("crd", c, kind != "dense")):
            if needed and arr is None:
                raise ValueError(f"level {k} ({kind}) needs a {name} array")
            if not needed and arr is not None:
                raise ValueError(f"level {k} ({kind}) has no {name} array; pass None")
            if arr is None:
                continue
            if not isinstance(arr, torch.Tensor):
                raise TypeError(f"{name}[{k}] must be a torch.Tensor, not "
                                f"{type(arr).__name__}")
            _check_strided(arr, f"{name}[{k}]")
            _check_cpu(arr, f"{name}[{k}]")
            if arr.dtype not in _INDEX_NAMES:
                raise TypeError(f"{name}[{k}] must be int32 or int64, got {arr.dtype}")
            if idx_dtype is None:
                idx_dtype = arr.dtype
            elif arr.dtype != idx_dtype:
                raise TypeError(f"all index arrays must share one dtype: {name}[{k}] is "
                                f"{arr.dtype}, an earlier one is {idx_dtype}")
            if arr.dim() != 1:
                raise ValueError(f"{name}[{k}] must be 1-D, got shape {list(arr.shape)}")
    idx_dtype = idx_dtype or torch.int32
    pos = [None if p is None else p.detach().resolve_neg().contiguous() for p in pos]
    crd = [None if c is None else c.detach().resolve_neg().contiguous() for c in crd]
    vals = values.resolve_neg().contiguous()
    _C.validate(shape, fmt.as_tuple(), [None if p is None else p.numpy() for p in pos],
                [None if c is None else c.numpy() for c in crd], c_values(vals),
                _INDEX_NAMES[idx_dtype])
    return SparseTensor(shape, fmt, pos, crd, vals, requires_grad=values.requires_grad,
                        index_dtype=idx_dtype, checked=True)
