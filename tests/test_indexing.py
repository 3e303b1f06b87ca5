"""Selecting along a dimension: index_select, narrow, A[rows], A[a:b:s], A[:, cols], A[mask].

Every case against the same indexing of the dense tensor (bit-exact), in every format,
with repeated and negative positions, empty selections and empty inputs; the result keeps
the format and (int64) index width, the input is never modified, and the values' gradient
flows through the selection.
"""
import pytest
import torch

import scorch

from conftest import SHAPES_2D, SHAPES_ND, make_dense, seed_of

FORMATS_2D = ["csr", "csc", "coo", "dcsr", "dcsc", "dense", "cd"]
FORMATS_3D = ["csf", "coo", "dcc", "cdc", "dense"]


def _index(size, seed):
    """Positions along a dimension of ``size``: repeats and a negative one included."""
    if size == 0:
        return torch.zeros(0, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, size, (size + 2,), generator=g)
    idx[0] = idx[-1]                        # a repeat
    idx[1] = idx[1] - size                  # the same place, counted from the end
    return idx


def _snapshot(A):
    return [t.clone() for t in A._pos + A._crd if t is not None], A.values().clone()


def _unchanged(A, snap):
    arrays, vals = snap
    return all(torch.equal(a, b) for a, b in
               zip(arrays, [t for t in A._pos + A._crd if t is not None])) and \
        torch.equal(vals, A.values())


@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
def test_select_2d(fmt, sid, shape, kind):
    x = make_dense(shape, torch.float64, seed_of("index", sid), kind)
    A = scorch.to_sparse(x, fmt)
    snap = _snapshot(A)
    r, c = _index(shape[0], 1), _index(shape[1], 2)
    cases = [
        (lambda: A[r], x[r]),
        (lambda: A[:, c], x[:, c]),
        (lambda: A.index_select(1, c % shape[1]), x.index_select(1, c % shape[1])),
        (lambda: torch.index_select(A, 0, r % shape[0]), x.index_select(0, r % shape[0])),
        (lambda: A[r.tolist()], x[r.tolist()]),
        (lambda: A[1::2], x[1::2]),
        (lambda: A[:, -3:], x[:, -3:]),
        (lambda: A[r[:0]], x[r[:0]]),
        (lambda: A[x.sum(1) > 0], x[x.sum(1) > 0]),
        (lambda: A.narrow(1, min(1, shape[1]), max(shape[1] - 2, 0)),
         x.narrow(1, min(1, shape[1]), max(shape[1] - 2, 0))),
    ]
    for k, (sel, ref) in enumerate(cases):
        S = sel()
        assert isinstance(S, scorch.SparseTensor) and S.format == A.format, k
        assert torch.equal(S.to_dense(), ref), k
    assert _unchanged(A, snap)


@pytest.mark.parametrize("fmt", FORMATS_3D)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_ND[:4], ids=[s[0] for s in SHAPES_ND[:4]])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_index_select_3d(fmt, sid, shape, kind, dim):
    x = make_dense(shape, torch.float32, seed_of("index3", sid), kind)
    A = scorch.to_sparse(x, fmt)
    idx = _index(shape[dim], 3) % max(shape[dim], 1)   # (index_select: no negatives)
    S = A.index_select(dim, idx)
    assert S.format == A.format
    assert torch.equal(S.to_dense(), x.index_select(dim, idx))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_selection_keeps_int64_and_carries_the_gradient(fmt):
    x = make_dense((7, 6), torch.float64, seed_of("index_grad", fmt), "empty_rows")
    A = scorch.to_sparse(x, fmt, index_dtype=torch.int64).requires_grad_()
    r, c = _index(7, 4), _index(6, 5)
    S, T = A[r], A[:, c]
    assert S.index_dtype == T.index_dtype == torch.int64
    w1, w2 = torch.rand(S.shape, dtype=x.dtype), torch.rand(T.shape, dtype=x.dtype)
    ((S.to_dense() * w1).sum() + (T.to_dense() * w2).sum()).backward()
    xd = x.clone().requires_grad_()
    ((xd[r] * w1).sum() + (xd[:, c] * w2).sum()).backward()
    stored = torch.zeros_like(x)
    stored[tuple(A.indices())] = 1
    torch.testing.assert_close(A.grad.to_dense(), xd.grad * stored)


def test_duplicates_are_summed_in_a_selection():
    D = scorch.from_components(
        (2, 3), "coo", pos=[torch.tensor([0, 3]), None],
        crd=[torch.tensor([0, 0, 1]), torch.tensor([1, 1, 2])],
        values=torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(D[[0, 0]].to_dense(), D.to_dense()[[0, 0]])


@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsr", "csc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_selection_keeps_stored_values_as_they_are(fmt, dtype):
    """Selecting along the innermost level is a product with a 0/1 matrix: every kept
    entry must come out as it was (an explicit zero stays stored, nan stays nan), with
    duplicates summed, in the input's dtype."""
    A = scorch.from_components(
        (3, 4), "coo", pos=[torch.tensor([0, 6]), None],
        crd=[torch.tensor([0, 0, 0, 1, 2, 2]), torch.tensor([0, 1, 1, 3, 2, 3])],
        values=torch.tensor([0.0, 2.0, 5.0, float("nan"), -0.0, 7.0], dtype=dtype))
    B = A.to_format(fmt)
    assert B.nnz == 5
    dim = 1 if fmt != "csc" else 0
    idx = [3, 1, 3, 0] if dim == 1 else [2, 0, 2]
    S = B.index_select(dim, torch.tensor(idx))
    assert S.dtype == dtype and S.format == B.format
    ref = A.to_dense().index_select(dim, torch.tensor(idx))
    assert torch.equal(S.to_dense().isnan(), ref.isnan())
    assert torch.equal(S.to_dense().nan_to_num(9.0), ref.nan_to_num(9.0))
    # the explicit zero at (0, 0) is still stored wherever column (row) 0 was picked
    stored = {tuple(c) for c in S.indices().T.tolist()}
    assert ((0, 3) if dim == 1 else (1, 0)) in stored


@pytest.mark.parametrize("fmt", FORMATS_2D)
def test_one_position_keeps_only_its_entries(fmt):
    """A[:, [j]] stores the column's entries, not one per row (a product with a
    one-column selection matrix once took an order that stored every row)."""
    x = make_dense((9, 7), torch.float32, seed_of("one-position", fmt), "random")
    A = scorch.to_sparse(x, fmt)
    for dim in (0, 1):
        for j in range(x.shape[dim]):
            S = A.index_select(dim, torch.tensor([j]))
            ref = x.index_select(dim, torch.tensor([j]))
            assert torch.equal(S.to_dense(), ref)
            if fmt not in ("dense", "cd"):       # (a dense level stores every position)
                assert S.nnz == int(torch.count_nonzero(ref)), (dim, j)


@pytest.mark.parametrize("key,err,match", [
    (torch.tensor([5]), IndexError, "out of range for dimension 0 of size 4"),
    (torch.tensor([-5]), IndexError, "out of range"),
    (torch.tensor([[0]]), NotImplementedError, "multi-dimensional index tensors"),
    (torch.tensor([0.5]), IndexError, "must be long, int, byte or bool tensors"),
    (torch.tensor(1.), IndexError, "must be long, int, byte or bool tensors"),
    (1.5, IndexError, "only integers, slices"),
    ({}, IndexError, "only integers, slices"),
    ("a", TypeError, "str"),
    (torch.tensor([True, False]), IndexError, "boolean mask along dim 0 needs 4"),
    (4, IndexError, "index 4 is out of bounds for dimension 0 with size 4"),
    ((0, -5), IndexError, "index -5 is out of bounds for dimension 1"),
    ((Ellipsis, 0, Ellipsis), IndexError, "a single ellipsis"),
    ((None, 0, 0, 0), IndexError, "too many indices"),
    ((False, [0, 2]), IndexError, "shape mismatch"),
    (([0, 1], slice(None), [1, 2]), IndexError, "too many indices"),
    ((torch.tensor([[0]]), slice(None)), NotImplementedError,
     r"A\[\(tensor\(\[\[0\]\]\), slice.*multi-dimensional index tensors"),
    ((torch.tensor([[5]]), slice(None)), IndexError, "index 5 is out of bounds"),
    ((None,) * 7, NotImplementedError, "at most 8 dimensions"),
    ((torch.tensor([0]), torch.tensor([1]), slice(None)), IndexError, "too many indices"),
    ((torch.tensor([0]), torch.tensor([4])), IndexError,
     "index 4 is out of bounds for dimension 1 with size 4"),
    ((torch.tensor([0]), torch.tensor([0.5])), IndexError, "must be long, int, byte or bool"),
    ((torch.tensor([0], dtype=torch.int8), torch.tensor([1])), IndexError,
     "dimension 0 must be an int64 or int32 tensor"),
    ((torch.tensor([True, False, True, True]), torch.tensor([1, 2])), IndexError,
     r"shape mismatch: .* shapes \[3\], \[2\]"),
    ((torch.tensor([True, False]), torch.tensor([1])), IndexError, "mask along dim 0 needs 4"),
    ((slice(None), slice(None), slice(None)), IndexError, "too many indices"),
    (slice(None, None, -1), ValueError, "step"),
])
def test_bad_selections_are_refused(key, err, match):
    A = scorch.to_sparse(torch.eye(4), "csr")
    with pytest.raises(err, match=match):
        A[key]
    with pytest.raises(IndexError, match="narrow"):
        A.narrow(0, 2, 3)
    with pytest.raises(IndexError, match="narrow: dim 5 is out of range"):
        A.narrow(5, 0, 1)
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        A.index_select(2, torch.tensor([0]))
    with pytest.raises(IndexError, match="out of range"):   # (as torch's index_select)
        A.index_select(0, torch.tensor([-1]))


@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
def test_pointwise_indices_as_torch(fmt, sid, shape, kind):
    """A[r, c] with integer tensors (or lists, or an int beside a tensor) on every
    dimension: the values at the pairs, broadcast as torch's advanced indexing (repeats,
    negative positions, absent entries 0), a dense tensor of the indices' shape; the input
    unchanged; the gradient of the values is the picked positions' summed weights, at
    the stored ones."""
    x = make_dense(shape, torch.float64, seed_of("pointwise", sid, fmt), kind)
    A = scorch.to_sparse(x, fmt)
    snap = _snapshot(A)
    n, m = shape
    r, c = _index(n, seed_of("pw-r", sid)), _index(m, seed_of("pw-c", sid))
    k = min(len(r), len(c))
    keys = [(r[:k], c[:k]), (r[:k].tolist(), c[:k].tolist())]
    if n and m:
        keys += [(r[:k].reshape(-1, 1), c[:k].reshape(1, -1)),   # broadcast to k x k
                 (r[:k].to(torch.int32), c[:k])]
    for key in keys:
        got, ref = A[key], x[key]
        assert type(got) is torch.Tensor and got.shape == ref.shape, key
        assert torch.equal(got, ref), key
    assert _unchanged(A, snap)
    if n and m and fmt != "dense":
        B = scorch.to_sparse(x, fmt).requires_grad_()
        w = torch.arange(1.0, k + 1, dtype=torch.float64)
        (B[r[:k], c[:k]] * w).sum().backward()
        want = torch.zeros(shape, dtype=torch.float64)
        want.index_put_((r[:k] % n, c[:k] % m), w, accumulate=True)
        stored = B.with_values(torch.ones_like(B.values())).to_dense() != 0
        assert torch.equal(B.grad.to_dense(), want * stored)


def test_pointwise_indices_nd_and_duplicates():
    x = make_dense((3, 4, 5), torch.float32, seed_of("pointwise-3d"), "random")
    i, j, k = torch.tensor([0, 2, 1, -1]), torch.tensor([3, 0, 0, 3]), torch.tensor([4, 4, 1, 0])
    for fmt in FORMATS_3D:
        B = scorch.to_sparse(x, fmt)
        assert torch.equal(B[i, j, k], x[i, j, k]), fmt
        assert torch.equal(B[i, 1, k], x[i, 1, k]), fmt
    # repeated coordinates of an uncoalesced tensor are summed, as to_dense sums them
    coo = torch.sparse_coo_tensor(torch.tensor([[1, 1, 0], [2, 2, 0]]),
                                  torch.tensor([1.0, 2.0, 5.0]), (3, 3))
    C = scorch.to_sparse(coo)
    assert torch.equal(C[torch.tensor([1, 0, 2]), torch.tensor([2, 0, 2])],
                       torch.tensor([3.0, 5.0, 0.0]))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_none_and_ellipsis_as_torch(fmt):
    """``...`` stands for the dimensions not indexed, ``None`` and ``True`` add one of
    size 1, ``False`` one of size 0."""
    x = make_dense((4, 5), torch.float32, seed_of("none-ellipsis", fmt), "random")
    A = scorch.to_sparse(x, fmt)
    for key in (None, Ellipsis, (None, slice(None)), (slice(None), None), (Ellipsis, None),
                (None, Ellipsis, None), (0, None), (None, 1), (Ellipsis, 1), (1, Ellipsis),
                (None, torch.tensor([1, 0]), None, 2), (Ellipsis, torch.tensor([2, 2])),
                (slice(None), None, slice(1, 3)), (0, 1, None), (None, 3, 4), True, False,
                (0, True, 1), (..., False), (slice(None), False, 2), (True, True),
                (True, False), (False, ..., True, None)):
        got, ref = A[key], x[key]
        if isinstance(got, scorch.SparseTensor):
            got = got.to_dense()
        assert got.shape == ref.shape and torch.equal(got, ref), key



def _as_dense(r):
    return r.to_dense() if isinstance(r, scorch.SparseTensor) else r


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "dense"])
def test_advanced_indices_broadcast_and_place_as_torch(fmt):
    """Index tensors, lists, masks and bools are torch's advanced indices: they broadcast
    together (a bool is one position or none), and their dimensions stand where the first
    of them does when adjacent, in front when a slice, None or a dimension of the ...
    separates them (an integer does not)."""
    x = make_dense((3, 4), torch.float32, seed_of("advanced", fmt), "random")
    A = scorch.to_sparse(x, fmt)
    r2, c = torch.tensor([[0, 2], [1, 2]]), torch.tensor([1, 3])
    m = torch.tensor([True, False, True])
    keys = [(r2, None, c), ([0, 1], [1, 2], None), ([0, 2], [1, 2], ..., None),
            (None, [0, 2], [1, 2]), ([0, 2], ..., [1, 2]), (r2, c), (r2[:, :1], c),
            (True, [0, 2]), ([0, 2], True), (True, [0, 2], [1, 3]), (False, [0]),
            (False, [0], [1]), (True, True), (True, False), (slice(None), True, [1, 3]),
            (slice(None), [1, 3], True), (slice(None), [1, 3], None, True),
            ([2, 0], slice(1, 3), True), (True, slice(None), [1, 3]),
            (m, torch.tensor([1, 2])), (m, [3]), (m, True, [1, 1]), (x > 0,), (x > 0, None),
            (None, x > 0), (torch.tensor(True), [0, 2]), (torch.tensor(1, dtype=torch.uint8),),
            (torch.tensor(1), [1, 3]), ((0, 2), [1, 1])]
    for key in keys:
        ref, got = x[key], _as_dense(A[key])
        assert got.shape == ref.shape and got.dtype == ref.dtype, key
        assert torch.equal(got, ref), key

    y = make_dense((3, 4, 5), torch.float64, seed_of("advanced-3d", fmt), "random")
    B = scorch.to_sparse(y, {"csr": "csf", "csc": "cdc", "dcsr": "dcc"}.get(fmt, fmt))
    i, j = torch.tensor([0, 2, 1]), torch.tensor([3, 0, 0])
    for key in [(i, 1, j), (i, j, 4), (1, i, j), (i, None, j, 2), (0, ..., i, j), (i, ..., 2, j),
                (0, slice(None), [1, 3]), (slice(None), [1, 3], 0), (0, True, [1, 3]),
                (True, 2, slice(None), [1, 3]), (slice(None), None, [2, 0]),
                (slice(1, 3), [2, 0], None, slice(None)), ([2, 0], 1)]:
        ref, got = y[key], _as_dense(B[key])
        assert got.shape == ref.shape and torch.equal(got, ref), key
    with pytest.raises(NotImplementedError, match="several index tensors beside slices"):
        B[i, :, j]

    if fmt != "dense":   # (the gradient of the values: the picked positions' weights)
        C = scorch.to_sparse(x, fmt).requires_grad_()
        w = torch.arange(1.0, 5.0).reshape(2, 2, 1)
        (C[r2, None, c] * w).sum().backward()
        xg = x.clone().requires_grad_()
        (xg[r2, None, c] * w).sum().backward()
        assert torch.equal(C.grad.to_dense(), xg.grad * (x != 0))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_ranges_of_rows_as_torch(fmt, index_dtype):
    """A[a:b], narrow and A[i] along csr's rows (csc's columns) copy one contiguous range
    of entries: against dense, empty and end ranges included, the index width kept, the
    result's arrays its own (a write to it leaves A alone), the gradient flowing."""
    x = make_dense((7, 5), torch.float64, seed_of("ranges", fmt), "empty_rows")
    A = scorch.to_sparse(x, fmt, index_dtype=index_dtype).requires_grad_()
    t = (lambda k: k) if fmt in ("csr", "coo", "dcsr") else (lambda k: (slice(None), k))
    keys = [slice(2, 5), slice(0, 7), slice(3, 3), slice(7, None), slice(-2, None),
            slice(1, 6, 2), 4, -1]
    for key in keys:
        ref, got = x[t(key)], A[t(key)]
        assert torch.equal(got.to_dense(), ref), key
        assert got.index_dtype == index_dtype, key
    dim = 0 if fmt != "csc" else 1
    assert torch.equal(A.narrow(dim, 1, 4).to_dense(), x.narrow(dim, 1, 4))
    S = A[t(slice(1, 4))]
    assert all(u.data_ptr() != v.data_ptr() for u, v in zip(S._crd + S._pos, A._crd + A._pos)
               if u is not None and v is not None and u.numel() and v.numel())
    with torch.no_grad():
        S.detach().copy_(S.detach() * 0)
    assert torch.equal(A.detach().to_dense(), x)
    (A[t(slice(2, 6))].to_dense() * 3).sum().backward()
    want = torch.zeros_like(x)
    want[t(slice(2, 6))] = 3
    assert torch.equal(A.grad.to_dense(), want * (x != 0))


def test_repeated_is_repeat_interleave():
    """scorch's repeat (no parallel region) against torch.repeat_interleave: dtypes kept,
    an int count, empty inputs, a tensor that records autograd."""
    from scorch._torch_ops import repeated

    for dt in (torch.int32, torch.int64, torch.float32):
        v = torch.arange(6).to(dt)
        for counts in (torch.tensor([0, 2, 1, 0, 3, 1]), torch.tensor([0, 2, 1, 0, 3, 1],
                                                                        dtype=torch.int32), 3, 0):
            got, ref = repeated(v, counts), torch.repeat_interleave(v, counts)
            assert got.dtype == ref.dtype and torch.equal(got, ref), (dt, counts)
        e = repeated(v[:0], torch.zeros(0, dtype=torch.int64))
        assert e.dtype == dt and e.shape == (0,)
    w = torch.arange(3.0, requires_grad=True)
    r = repeated(w, torch.tensor([2, 0, 1]))
    r.sum().backward()
    assert torch.equal(w.grad, torch.tensor([2.0, 0.0, 1.0]))

# ---- torch.cat: joining along a dimension --------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_matches_dense(fmt, dim):
    shapes = [(3, 4), (0, 4), (2, 4), (1, 4)] if dim == 0 else [(3, 4), (3, 0), (3, 2)]
    xs = [make_dense(s, torch.float64, seed_of("cat", k), "empty_rows" if k and s[0] else
                     "random") for k, s in enumerate(shapes)]
    others = ["coo", "csr", "dense", "csc"]
    As = [scorch.to_sparse(x, fmt if k == 0 else others[k % 4]) for k, x in enumerate(xs)]
    snaps = [_snapshot(A) for A in As]
    C = torch.cat(As, dim)
    f = As[0].format           # (a dense last level compressed: the others' places only)
    assert C.format == (f if f.kinds[-1] else scorch.Format(f.text[:-1] + "c", order=f.order))
    assert torch.equal(C.to_dense(), torch.cat(xs, dim))
    places = set()
    offset = 0
    for A in As:
        places |= {tuple(p[k] + (offset if k == dim % 2 else 0) for k in range(2))
                   for p in _stored(A)}
        offset += A.shape[dim]
    assert _stored(C) == places
    assert all(_unchanged(A, s) for A, s in zip(As, snaps))


def test_cat_promotes_widens_and_carries_gradients():
    x, y = make_dense((3, 4), torch.float32, 1), make_dense((2, 4), torch.float64, 2)
    A = scorch.to_sparse(x, "csr").requires_grad_()
    B = scorch.to_sparse(y, "coo", index_dtype=torch.int64).requires_grad_()
    C = torch.cat([A, B])
    assert C.dtype == torch.float64 and C.index_dtype == torch.int64
    w = torch.rand(5, 4, dtype=torch.float64)
    (C.to_dense() * w).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), (w[:3] * (x != 0)).float())
    torch.testing.assert_close(B.grad.to_dense(), w[3:] * (y != 0))


def test_cat_refusals():
    A = scorch.to_sparse(torch.eye(3), "csr")
    with pytest.raises(NotImplementedError, match="every tensor must be a SparseTensor"):
        torch.cat([A, torch.eye(3)])
    with pytest.raises(RuntimeError, match="differ outside dim 1"):
        torch.cat([A, scorch.to_sparse(torch.eye(2), "csr")], 1)
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        torch.cat([A, A], 2)


def test_empty_slices_and_uint8_masks_as_torch():
    x = make_dense((3, 4), torch.float32, seed_of("index_fuzz"))
    A = scorch.to_sparse(x, "csr")
    for key in [(slice(2, 1),), (slice(None), slice(3, 1)), (slice(-1, 1),)]:
        assert torch.equal(A[key].to_dense(), x[key])
    m = torch.tensor([1, 0, 1], dtype=torch.uint8)   # (torch reads uint8 as a mask)
    assert torch.equal(A[m].to_dense(), x[m.bool()])
    with pytest.raises(IndexError, match="1-D integer tensor"):   # (as torch's)
        A.index_select(0, m)


@pytest.mark.parametrize("fmt", FORMATS_2D)
def test_integer_indexing_drops_the_dimension(fmt):
    """A[i], A[:, j], A[i, j], mixed with slices and an index tensor: against dense; a
    row of a csr (a column of a csc) copies its segment; the rest store the input's
    places at the position (test_select_stores_exactly_the_input_places)."""
    x = make_dense((5, 6), torch.float64, seed_of("select", fmt), "empty_rows")
    A = scorch.to_sparse(x, fmt).requires_grad_()
    snap = _snapshot(A)
    keys = [0, -1, 3, (slice(None), 2), (2, 3), (1, torch.tensor([0, 5, 5])),
            (torch.tensor(4),), (slice(1, 4), 0), (torch.tensor([3, 0]), -1), (0, 0)]
    for key in keys:
        r = A[key]
        ref = x[key]
        got = r.to_dense() if isinstance(r, scorch.SparseTensor) else r
        assert got.shape == ref.shape and torch.equal(got.detach(), ref), key
    assert torch.equal(torch.select(A, 1, 4).to_dense(), x.select(1, 4))
    assert torch.equal(A.select(0, -2).to_dense(), x.select(0, -2))
    w = torch.rand(6, dtype=torch.float64)
    ((A[2].to_dense() * w).sum() + A[1, 3] + A[:, 0].to_dense().sum()).backward()
    want = torch.zeros_like(x)
    want[2] += w
    want[1, 3] += 1
    want[:, 0] += 1
    stored = torch.zeros_like(x)
    stored[tuple(A.indices())] = 1
    torch.testing.assert_close(A.grad.to_dense(), want * stored)
    assert _unchanged(A, snap)


@pytest.mark.parametrize("fmt", FORMATS_3D)
def test_integer_indexing_3d(fmt):
    y = make_dense((3, 4, 5), torch.float32, seed_of("select3", fmt))
    B = scorch.to_sparse(y, fmt)
    for key in [0, (slice(None), 1), (slice(None), slice(None), -1), (1, 2), (2, 3, 4)]:
        r = B[key]
        got = r.to_dense() if isinstance(r, scorch.SparseTensor) else r
        assert torch.equal(got, y[key]), key


@pytest.mark.parametrize("fmt", FORMATS_2D)
def test_unsqueeze_squeeze_stack(fmt):
    """unsqueeze shares the arrays under a dense level of one position; squeeze drops
    size-1 dimensions; torch.stack joins unsqueezed tensors; the batched products take
    the result; gradients reach the values."""
    x = make_dense((4, 5), torch.float64, seed_of("unsqueeze", fmt), "empty_rows")
    y = make_dense((4, 5), torch.float64, seed_of("unsqueeze", fmt, 2))
    A = scorch.to_sparse(x, fmt).requires_grad_()
    B = scorch.to_sparse(y, "coo")
    for d in (0, 1, 2, -1, -3):
        U = A.unsqueeze(d)
        assert U.values() is A.values() and torch.equal(U.to_dense(), x.unsqueeze(d))
    assert torch.equal(A.unsqueeze(1).squeeze().to_dense(), x)
    assert torch.equal(torch.squeeze(A.unsqueeze(0), 0).to_dense(), x)
    assert torch.equal(A.unsqueeze(2).squeeze(0).to_dense(), x.unsqueeze(2))   # (size 4)
    for d in (0, 1, -1):
        assert torch.equal(torch.stack([A, B], d).to_dense(), torch.stack([x, y], d))
    X = torch.rand(5, 3, dtype=torch.float64)
    torch.testing.assert_close(torch.bmm(A.unsqueeze(0), X.unsqueeze(0)), (x @ X)[None])
    w = torch.rand(2, 4, 5, dtype=torch.float64)
    (torch.stack([A, B]).to_dense() * w).sum().backward()
    stored = torch.zeros_like(x)
    stored[tuple(A.indices())] = 1
    torch.testing.assert_close(A.grad.to_dense(), w[0] * stored)
    assert torch.equal(torch.hstack([A, B]).to_dense(), torch.hstack([x, y]))
    assert torch.equal(torch.vstack([A, B]).to_dense(), torch.vstack([x, y]))
    a1, b1 = scorch.to_sparse(x[1], "coo"), scorch.to_sparse(y[2], "coo")
    assert torch.equal(torch.vstack([a1, b1]).to_dense(), torch.vstack([x[1], y[2]]))
    assert torch.equal(torch.hstack([a1, b1]).to_dense(), torch.hstack([x[1], y[2]]))
    with pytest.raises(RuntimeError, match="equal size"):
        torch.stack([A, scorch.to_sparse(x[:3], "csr")])
    with pytest.raises(IndexError, match="unsqueeze: dim 3"):
        A.unsqueeze(3)


@pytest.mark.parametrize("fmt", ["dcsr", "coo", "dcsc"])
def test_selection_along_a_hypersparse_dimension_is_o_nnz(fmt):
    """2^40 columns, 3 entries: selecting columns (or rows of the transpose) goes through
    the coordinates, not a selection matrix or csr of 2^40 positions."""
    N = 2 ** 40
    C = scorch.from_components((3, N), "coo", pos=[torch.tensor([0, 3]), None],
                               crd=[torch.tensor([0, 1, 2]), torch.tensor([5, N - 1, 7])],
                               values=torch.tensor([1., 2., 3.])).to_format(fmt)
    assert C[:, [N - 1, 0, 5, 5]].to_dense().tolist() == [[0., 0, 1, 1], [2, 0, 0, 0],
                                                            [0, 0, 0, 0]]
    assert C.t()[[N - 1, 0, 7]].to_dense().tolist() == [[0., 2, 0], [0, 0, 0], [0, 0, 3]]
    assert torch.index_select(C, 1, torch.tensor([7, N - 1])).to_dense().tolist() == \
        [[0., 0], [0, 2], [3, 0]]


@pytest.mark.parametrize("fmt", ["csr", "dcsr", "coo", "dcsc", "csc"])
def test_slices_of_a_wide_dimension_are_o_nnz(fmt):
    """Slices and narrow along 2^40 columns (or rows of the transpose) keep the entries in
    range, renumbered, without listing the range (it built a 2^40-entry arange); and on
    a small wide matrix, as torch slices, gradients included."""
    N = 2 ** 40
    C = scorch.from_components((3, N), "coo", pos=[torch.tensor([0, 3]), None],
                               crd=[torch.tensor([0, 1, 2]), torch.tensor([5, N - 1, 7])],
                               values=torch.tensor([1., 2., 3.]))
    if fmt != "csc":   # (csc of 2^40 columns: its positions alone take 8 TB)
        C = C.to_format(fmt)
        S = C[:, 5:]
        assert S.shape == (3, N - 5) and S.to_torch(
            layout=torch.sparse_coo).coalesce().indices().tolist() == [[0, 1, 2], [0, N - 6, 2]]
        S = C[:, 1::2]   # (odd columns: 5 and 7 and N - 1)
        assert S.shape == (3, N // 2) and sorted(S.values().tolist()) == [1., 2., 3.]
        S = C.narrow(1, 6, N - 7)   # (6 .. N - 2: only column 7)
        assert S.values().tolist() == [3.] and S.shape == (3, N - 7)
        T = C.t()[6:]
        assert T.shape == (N - 6, 3) and sorted(T.values().tolist()) == [2., 3.]
    x = make_dense((4, 3000), torch.float64, seed_of("wide-slices", fmt), density=0.002)
    X = scorch.to_sparse(x, fmt).requires_grad_()
    for key in (slice(1, None), slice(None, None, 7), slice(5, 2900, 3)):
        torch.testing.assert_close(X[:, key].to_dense(), x[:, key])
    (X[:, 5:2900:3].to_dense() * torch.arange(965.)).sum().backward()
    want = torch.zeros(4, 3000, dtype=torch.float64)
    want[:, 5:2900:3] = torch.arange(965.)
    torch.testing.assert_close(X.grad.to_dense(), want * (x != 0))


def test_numpy_keys_index_as_torch_reads_them():
    import numpy as np

    x = torch.tensor([[1., 0, 2], [0, 3, 0]])
    A = scorch.to_sparse(x, "csr")
    torch.testing.assert_close(A[np.int64(1)].to_dense(), x[1])
    torch.testing.assert_close(A[np.array([1, 0])].to_dense(), x[[1, 0]])
    torch.testing.assert_close(A[:, np.array([2, 0])].to_dense(), x[:, [2, 0]])
    torch.testing.assert_close(A[np.int32(0), np.int64(2)], x[0, 2])
    torch.testing.assert_close(A[np.array([True, False])].to_dense(), x[[True, False]])


def _stored(A):
    """A's stored places, as a set of coordinate tuples."""
    return set(map(tuple, A.indices().t().tolist()))


@pytest.mark.parametrize("fmt", FORMATS_2D + FORMATS_3D + ["ddc", "dcd", "cdd", "ccd"])
def test_select_stores_exactly_the_input_places(fmt):
    """select (A[:, j], A[i], unbind) stores exactly the input's stored places at that
    position: a csr's column is a sparse vector, not a dense one holding every row's
    zero (softmax and SDPA read the stored places), and a slice of a format whose
    dense levels store whole rows keeps those rows."""
    n = len(fmt) if fmt not in FORMATS_2D + FORMATS_3D else (2 if fmt in FORMATS_2D else 3)
    shape = (5, 6) if n == 2 else (3, 4, 5)
    x = make_dense(shape, torch.float32, seed_of("select-places", fmt), "empty_rows")
    A = scorch.to_sparse(x, fmt)
    places = _stored(A)
    for d in range(n):
        for i in range(shape[d]):
            r = A.select(d, i)
            want = {p[:d] + p[d + 1:] for p in places if p[d] == i}
            assert _stored(r) == want, (d, i, r.format)
            assert torch.equal(r.to_dense(), x.select(d, i))


def test_softmax_of_a_column_reads_its_entries_only():
    """torch.softmax of a csr's column (A[:, j]) is torch.sparse.softmax's: unstored
    rows get nothing (a dense-format column once gave them weight)."""
    x = torch.tensor([[1., 0, 2], [0, 0, 3], [0, 0, 0], [4, 0, 0]])
    for fmt in ("csr", "csc", "coo", "dcsr"):
        A = scorch.to_sparse(x, fmt)
        for j in range(3):
            got = torch.softmax(A[:, j], 0).to_dense()
            want = torch.sparse.softmax(x.to_sparse().select(1, j).coalesce(), 0).to_dense()
            torch.testing.assert_close(got, want)


def test_diagonal_over_a_dropped_sparse_level_stores_its_entries():
    """einsum's diagonal "iji->ij" of a tensor whose last (compressed) level is dropped
    stores the places of the diagonal's entries only, not every j of their rows."""
    y = torch.zeros(3, 4, 3)
    y[0, 1, 0], y[2, 3, 2], y[1, 0, 2] = 1., 2., 5.
    for fmt in ("ddc", "csf", "coo"):
        B = scorch.to_sparse(y, fmt)
        r = scorch.einsum("iji->ij", B)
        assert torch.equal(r.to_dense(), torch.einsum("iji->ij", y))
        assert _stored(r) <= {(0, 1), (2, 3)}, fmt


def test_products_and_slices_store_only_what_was_multiplied():
    """A sparse output of one entry (1 x n times n x 1, a 1 x 1 product, a slice of one
    column through the selection product) stores it only where products meet (the
    schedule let a loop of one iteration store its entry regardless); a cdd read in
    another level order (A[..., 0:1]) stores only the rows A stores (its transposed copy
    kept a dense last level that stored every row)."""
    E = scorch.to_sparse(torch.zeros(1, 1), "csr")
    assert (E @ E).nnz == 0
    a = scorch.to_sparse(torch.tensor([[0., 1]]), "csr")
    b = scorch.to_sparse(torch.tensor([[1.], [0.]]), "csr")
    assert (a @ b).nnz == 0 and torch.equal((a @ b).to_dense(), torch.zeros(1, 1))
    assert _stored(a[:, 0:1]) == set() and _stored(a[:, 1:2]) == {(0, 0)}
    x = torch.zeros(3, 2, 2)
    x[0, 0, 0], x[2, 1, 1] = 1., 2.
    for fmt in ("cdd", "ccd", "dcd", "ddc", "cdc"):
        A = scorch.to_sparse(x, fmt)
        for key in ((Ellipsis, slice(0, 1)), (Ellipsis, slice(None, None, 2)),
                    (slice(None), slice(1, 2))):
            r = A[key]
            assert torch.equal(r.to_dense(), x[key])
            stored_rows = {p[0] for p in _stored(A)}
            assert {p[0] for p in _stored(r)} <= stored_rows, (fmt, key)
    y = torch.zeros(4, 3)
    y[1] = torch.tensor([1., 0, 2])
    C = scorch.to_sparse(y, "cd")                   # (one stored row)
    G = torch.ones(4, 2)
    torch.testing.assert_close(C.t() @ G, y.t() @ G)
    assert _stored(scorch.einsum("ij->ji", C)) == {(j, 1) for j in range(3)}


def test_cat_and_stack_store_exactly_their_operands_places():
    """cat / stack in the first operand's format, its dense last level compressed where
    another operand does not store every place (a cd first operand padded the others'
    entries into whole rows of stored zeros, which softmax weighed)."""
    A = scorch.to_sparse(torch.tensor([[1., 0, 0]]), "cd")     # (stores its whole row)
    B = scorch.to_sparse(torch.tensor([[0., 0, 5]]), "csr")
    C = torch.cat([A, B], 1)
    assert _stored(C) == {(0, 0), (0, 1), (0, 2), (0, 5)}
    assert torch.equal(C.to_dense(), torch.tensor([[1., 0, 0, 0, 0, 5]]))
    S = torch.stack([A, B])
    assert _stored(S) == {(0, 0, 0), (0, 0, 1), (0, 0, 2), (1, 0, 2)}
    D = scorch.to_sparse(torch.ones(2, 2), "dense")
    E = scorch.to_sparse(torch.zeros(2, 2), "csr")
    assert _stored(torch.cat([D, E])) == {(i, j) for i in range(2) for j in range(2)}
    assert torch.cat([D, D]).format == D.format and torch.cat([D, D]).nnz == 8
    w = torch.softmax(C, 1).to_dense()
    assert w[0, 3] == 0 and w[0, 4] == 0 and torch.isclose(w.sum(), torch.tensor(1.))


@pytest.mark.parametrize("fmt", FORMATS_3D)
def test_movedim_as_torch(fmt):
    """movedim / moveaxis (a permute): as torch's, with its refusals of bad dims; it had
    reached aten.permute and been refused."""
    x = make_dense((2, 3, 4), torch.float32, seed_of("movedim", fmt))
    A = scorch.to_sparse(x, fmt)
    for s, d in [(0, 2), (-1, 0), ([0, 1], [2, 0]), ((2,), (1,))]:
        assert torch.equal(torch.movedim(A, s, d).to_dense(), torch.movedim(x, s, d))
        assert torch.equal(A.moveaxis(s, d).to_dense(), x.moveaxis(s, d))
    with pytest.raises(RuntimeError, match="same number of dims"):
        torch.movedim(A, [0, 1], [0])
    with pytest.raises(RuntimeError, match="repeated dim"):
        torch.movedim(A, [0, 0], [1, 2])
    with pytest.raises(IndexError):
        torch.movedim(A, 3, 0)


def test_cat_and_stack_places_over_every_level_kind_and_order():
    """Every d/c level kind and order in 2-D and 3-D, joined with itself and with a coo
    along every dim: exactly the operands' places (their own format kept where it stores
    them exactly, as cd rows stacked along their compressed dim), and the dense values."""
    import itertools
    g = torch.Generator().manual_seed(0)
    for nd in (2, 3):
        shape = (3, 2, 2)[:nd]
        for kinds in itertools.product("dc", repeat=nd):
            for order in itertools.permutations(range(nd)):
                f = scorch.Format("".join(kinds), order=order)
                for d in range(nd):
                    for other in (f, "coo"):
                        xs = [torch.randn(shape, generator=g) *
                              (torch.rand(shape, generator=g) < .4) for _ in range(2)]
                        xs[1][0] = 0
                        As = [scorch.to_sparse(xs[0], f), scorch.to_sparse(xs[1], other)]
                        for op in (torch.cat, torch.stack):
                            R = op(As, d)
                            want = set()
                            for k, A in enumerate(As):
                                for p in map(list, _stored(A)):
                                    if op is torch.cat:
                                        p[d] += k * shape[d]
                                    else:
                                        p.insert(d, k)
                                    want.add(tuple(p))
                            assert _stored(R) == want, (op.__name__, f, other, d)
                            assert torch.equal(R.to_dense(), op(xs, d))
    C = scorch.to_sparse(torch.tensor([[1., 0], [0, 0]]), "cd")
    assert torch.cat([C, C]).format == C.format               # (rows: kept)
    assert torch.stack([C, C]).format == scorch.Format("dcd")


@pytest.mark.parametrize("fmt", FORMATS_2D)
def test_dot_and_outer_of_a_column(fmt):
    """torch.dot / outer / ger with a 1-D SparseTensor (a column A[:, j]) on either side:
    as the dense vectors', the gradient reaching A's values; torch's errors for bad
    shapes and dtypes (they were refused through aten)."""
    x = make_dense((5, 4), torch.float64, seed_of("dot", fmt), "empty_rows")
    v = torch.linspace(-1, 1, 5, dtype=torch.float64)
    A = scorch.to_sparse(x, fmt).requires_grad_()
    for j in range(4):
        c = A[:, j]
        assert torch.allclose(torch.dot(c, v), torch.dot(x[:, j], v))
        assert torch.allclose(v.dot(c), torch.dot(v, x[:, j]))
        for o, want in ((torch.outer(c, v), torch.outer(x[:, j], v)),
                        (torch.ger(v, c), torch.outer(v, x[:, j])),
                        (c.outer(A[:, 0]), torch.outer(x[:, j], x[:, 0]))):
            got = o.to_dense() if isinstance(o, scorch.SparseTensor) else o
            assert torch.allclose(got, want)
    torch.dot(A[:, 1], v).backward()
    want = torch.zeros_like(x)
    want[:, 1] = v
    stored = torch.zeros_like(x, dtype=torch.bool)
    stored[tuple(A.indices())] = True
    assert torch.allclose(A.grad.to_dense(), want * stored)
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):
        torch.dot(A[:, 0], torch.ones(4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.dot(A[:, 0], v.float())
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        torch.outer(A, v)
