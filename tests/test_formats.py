"""Formats and conversions, differentially against the dense reference.

The grid: every format × value dtype × index dtype × shape × kind of input must round-trip
bit-exactly through ``scorch.to_sparse(x, fmt).to_dense()``, and every ``to_format(a -> b)``
must too, leaving its source unchanged.  Then the rest of the tensor's surface: explicit
zeros, to_torch, to_scipy, from_edge_index, from_components, values/indices, with_values,
clone, repr.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

import scorch
from scorch import Format

from conftest import (FLOAT_DTYPES, INDEX_DTYPES, SHAPES_2D, SHAPES_ND, SOURCES_2D,
                      SOURCES_ND, assert_arrays_equal, assert_unchanged, check_sparse,
                      duplicate_coo, make_dense, make_source, nonzero_coords, seed_of,
                      snapshot, sparse_arrays)

FORMATS_2D = ["dense", "csr", "csc", "coo", "dcsr", "dcsc", "cd", "c(nonunique)s",
              Format("dc", order=(1, 0)), "c(nonunique)d", "c(nonunique)c"]
FORMATS_BY_NDIM = {
    3: ["dense", "csf", "coo", "dcc", "cdc", "c(nonunique)s(nonunique)s",
        Format("ccc", order=(2, 0, 1)), "c(nonunique)s(nonunique)d", "c(nonunique)sd"],
    4: ["dense", "csf", "coo", "dcdc", Format("cccc", order=(3, 1, 0, 2))],
}
# to_format pairs run over these (all pairs, both directions, a format to itself too).
PAIR_FORMATS_2D = ["dense", "csr", "csc", "coo", "dcsr", "dcsc", "cd", "c(nonunique)s",
                   "c(nonunique)d"]
PAIR_FORMATS_3D = ["dense", "csf", "coo", "dcc", "cdc", "c(nonunique)s(nonunique)d"]
INDEX_PAIRS = [(torch.int32, torch.int32), (torch.int64, torch.int64),
               (torch.int32, torch.int64), (torch.int64, torch.int32)]


def fid(f):
    return repr(f) if isinstance(f, Format) else f


def dtid(d):
    return str(d).replace("torch.", "")


def shape_params(shapes):
    return [pytest.param(shape, kind, id=name) for name, shape, kind in shapes]


ND_CASES = [pytest.param(shape, kind, fmt, id=f"{name}-{fid(fmt)}")
            for name, shape, kind in SHAPES_ND for fmt in FORMATS_BY_NDIM[len(shape)]]


# ---- the format descriptors themselves ------------------------------------------------

@pytest.mark.parametrize("spec, ndim, levels, unique, order, name", [
    ("dense", 2, ("dense", "dense"), (True, True), (0, 1), "dense"),
    ("csr", 2, ("dense", "compressed"), (True, True), (0, 1), "csr"),
    ("csc", 2, ("dense", "compressed"), (True, True), (1, 0), "csc"),
    ("coo", 2, ("compressed", "singleton"), (False, False), (0, 1), "coo"),
    ("dcsr", 2, ("compressed", "compressed"), (True, True), (0, 1), "dcsr"),
    ("dcsc", 2, ("compressed", "compressed"), (True, True), (1, 0), "dcsc"),
    ("csf", 3, ("compressed",) * 3, (True,) * 3, (0, 1, 2), "csf"),
    ("coo", 3, ("compressed", "singleton", "singleton"), (False, False, False), (0, 1, 2),
     "coo"),
    ("dense", 4, ("dense",) * 4, (True,) * 4, (0, 1, 2, 3), "dense"),
    ("cd", 2, ("compressed", "dense"), (True, True), (0, 1), None),
    ("dc", 2, ("dense", "compressed"), (True, True), (0, 1), "csr"),
    ("c(nonunique)s", 2, ("compressed", "singleton"), (False, True), (0, 1), None),
    ("dense, compressed", 2, ("dense", "compressed"), (True, True), (0, 1), "csr"),
])
def test_format_parse(spec, ndim, levels, unique, order, name):
    f = Format.parse(spec, ndim)
    assert f.ndim == ndim
    assert f.levels == levels
    assert f.order == order
    assert f.name == name
    assert f.unique == unique
    if name is not None:
        assert str(f) == name
    assert Format.parse(f, ndim) is f


def test_format_equality_and_hash():
    csc = Format("dc", order=(1, 0))
    assert csc == Format.parse("csc", 2)
    assert hash(csc) == hash(Format.parse("csc", 2))
    assert csc.name == "csc" and str(csc) == "csc"
    assert Format("dc") == Format.parse("csr", 2)
    assert Format("dc") != csc
    assert Format("cd").text == "cd" and str(Format("cd")) == "cd"
    permuted = Format("ccc", order=(2, 0, 1))
    assert permuted.order == (2, 0, 1) and "order" in str(permuted)
    assert eval(repr(permuted), {"Format": Format}) == permuted


# ---- the grid: to_sparse(x, fmt).to_dense() == x ----------------------------------------

@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtid)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
@pytest.mark.parametrize("source", SOURCES_2D)
@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fid)
@pytest.mark.parametrize("shape, kind", shape_params(SHAPES_2D))
def test_to_sparse_2d(shape, kind, fmt, source, dtype, index_dtype):
    seed = seed_of(shape, kind, source, dtype)
    ref = make_dense(shape, dtype, seed, kind)
    x, stored = make_source(source, ref, seed)
    snap = snapshot(x)
    A = scorch.to_sparse(x, fmt, index_dtype=index_dtype)
    check_sparse(A, ref, fmt, index_dtype, stored)
    assert_unchanged(x, snap)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtid)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
@pytest.mark.parametrize("source", SOURCES_ND)
@pytest.mark.parametrize("shape, kind, fmt", ND_CASES)
def test_to_sparse_nd(shape, kind, fmt, source, dtype, index_dtype):
    seed = seed_of(shape, kind, source, dtype)
    ref = make_dense(shape, dtype, seed, kind)
    x, stored = make_source(source, ref, seed)
    snap = snapshot(x)
    A = scorch.to_sparse(x, fmt, index_dtype=index_dtype)
    check_sparse(A, ref, fmt, index_dtype, stored)
    assert_unchanged(x, snap)


@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fid)
@pytest.mark.parametrize("shape, kind", shape_params(SHAPES_2D))
def test_nnz_from_dense_counts_nonzeros(shape, kind, fmt):
    """Formats whose last level is sparse store exactly the nonzeros of a dense input."""
    ref = make_dense(shape, torch.float32, seed_of("nnz", shape), kind)
    A = scorch.to_sparse(ref, fmt)
    f = Format.parse(fmt, 2)
    if f.levels[-1] != "dense":
        assert A.nnz == int(torch.count_nonzero(ref))
    elif f.levels == ("dense", "dense"):
        assert A.nnz == ref.numel()


def test_default_index_dtype_is_int32():
    x = make_dense((5, 6), torch.float32, 1)
    assert scorch.to_sparse(x, "csr").index_dtype == torch.int32
    assert scorch.to_sparse(x.to_sparse(), "coo").index_dtype == torch.int32
    assert scorch.to_sparse(sp.csr_array(x.numpy()), "csc").index_dtype == torch.int32


def test_default_index_dtype_is_int64_when_int32_cannot_hold_a_dimension():
    n = 2**31 + 5
    x = torch.sparse_coo_tensor(torch.tensor([[0, 0], [1, n - 1]]), torch.tensor([1., 2.]),
                                (1, n), check_invariants=True)
    for fmt in ("csr", "coo", "dcsr"):
        A = scorch.to_sparse(x, fmt)
        assert A.index_dtype == torch.int64
        assert A.shape == (1, n) and A.nnz == 2
        assert A.indices(1)[1].tolist() == [1, n - 1]
        assert A.values().tolist() == [1.0, 2.0]


def test_to_sparse_of_a_sparse_tensor_converts():
    ref = make_dense((7, 13), torch.float64, 3)
    A = scorch.to_sparse(ref, "csr")
    snap = sparse_arrays(A)
    B = scorch.to_sparse(A, "dcsc", index_dtype=torch.int64)
    check_sparse(B, ref, "dcsc", torch.int64, nonzero_coords(ref))
    assert_arrays_equal(sparse_arrays(A), snap)


# ---- the grid: to_format(a -> b) ------------------------------------------------------

def _check_to_format(ref, a, b, src_it, dst_it):
    A = scorch.to_sparse(ref, a, index_dtype=src_it)
    before = sparse_arrays(A)
    B = A.to_format(b, index_dtype=dst_it)
    check_sparse(B, ref, b, dst_it, nonzero_coords(ref))
    assert_arrays_equal(sparse_arrays(A), before)
    assert torch.equal(A.to_dense(), ref)


@pytest.mark.parametrize("src_it, dst_it", INDEX_PAIRS,
                         ids=[f"{dtid(a)}-{dtid(b)}" for a, b in INDEX_PAIRS])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
@pytest.mark.parametrize("b", PAIR_FORMATS_2D)
@pytest.mark.parametrize("a", PAIR_FORMATS_2D)
@pytest.mark.parametrize("shape, kind", shape_params(SHAPES_2D))
def test_to_format_2d(shape, kind, a, b, dtype, src_it, dst_it):
    ref = make_dense(shape, dtype, seed_of("pair", shape, dtype), kind)
    _check_to_format(ref, a, b, src_it, dst_it)


@pytest.mark.parametrize("src_it, dst_it", INDEX_PAIRS,
                         ids=[f"{dtid(a)}-{dtid(b)}" for a, b in INDEX_PAIRS])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
@pytest.mark.parametrize("b", PAIR_FORMATS_3D)
@pytest.mark.parametrize("a", PAIR_FORMATS_3D)
@pytest.mark.parametrize("shape, kind", shape_params([s for s in SHAPES_ND
                                                      if len(s[1]) == 3]))
def test_to_format_3d(shape, kind, a, b, dtype, src_it, dst_it):
    ref = make_dense(shape, dtype, seed_of("pair3", shape, dtype), kind)
    _check_to_format(ref, a, b, src_it, dst_it)


@pytest.mark.parametrize("b", PAIR_FORMATS_2D)
@pytest.mark.parametrize("a", ["coo", "c(nonunique)s"])
def test_to_format_from_summed_duplicates(a, b):
    """A nonunique source built from an uncoalesced COO converts like its sum."""
    ref = make_dense((7, 13), torch.float64, seed_of("dupsrc"))
    idx, vals, stored = duplicate_coo(ref, 5)
    x = torch.sparse_coo_tensor(idx, vals, ref.shape, check_invariants=True)
    A = scorch.to_sparse(x, a)
    before = sparse_arrays(A)
    B = A.to_format(b)
    check_sparse(B, ref, b, torch.int32, stored)
    assert_arrays_equal(sparse_arrays(A), before)


# ---- non-unique levels above dense and compressed levels -------------------------------
# A non-unique level opens one position per entry only where a singleton level below needs
# it (coo's c(nonunique)s); above a dense or compressed level equal coordinates share a
# position, so every conversion's output is coalesced (it stored one padded row per entry).

COALESCED_2D = ["c(nonunique)d", "c(nonunique)c", "c(nonunique)c(nonunique)", "dc(nonunique)",
                Format("c(nonunique)d", order=(1, 0)), "coo", "csr", "dcsr"]
COALESCED_3D = ["c(nonunique)s(nonunique)d", "c(nonunique)sd", "c(nonunique)s(nonunique)c",
                "c(nonunique)sc", "c(nonunique)dd", "c(nonunique)cd", "cc(nonunique)d",
                "dc(nonunique)s", Format("c(nonunique)s(nonunique)d", order=(2, 0, 1)),
                Format("c(nonunique)sd", order=(1, 2, 0)), "coo", "csf"]
COALESCED_CASES = (
    [pytest.param(shape, kind, f, id=f"{name}-{fid(f)}") for f in COALESCED_2D
     for name, shape, kind in [("1x2", (1, 2), "full"), ("0x3", (0, 3), "random"),
                               ("3x0", (3, 0), "random"), ("zeros_4x6", (4, 6), "zeros"),
                               ("empty_rows_6x4", (6, 4), "empty_rows"),
                               ("7x13", (7, 13), "random")]]
    + [pytest.param(shape, kind, f, id=f"{name}-{fid(f)}") for f in COALESCED_3D
       for name, shape, kind in [("1x1x2", (1, 1, 2), "full"), ("2x0x3", (2, 0, 3), "random"),
                                 ("zeros_2x3x2", (2, 3, 2), "zeros"),
                                 ("empty_rows_4x3x2", (4, 3, 2), "empty_rows"),
                                 ("3x4x5", (3, 4, 5), "random")]])


def _coo_with_duplicates(ref, index_dtype, seed):
    """A scorch coo built by from_components holding duplicates (sorted, uncoalesced),
    and the coordinates it stores."""
    idx, vals, stored = duplicate_coo(ref, seed)
    key = torch.zeros(idx.shape[1], dtype=torch.int64)
    for d in range(ref.dim()):
        key = key * ref.shape[d] + idx[d]
    o = key.argsort(stable=True)
    idx, vals = idx[:, o], vals[o]
    pos = [torch.tensor([0, idx.shape[1]], dtype=index_dtype)] + [None] * (ref.dim() - 1)
    A = scorch.from_components(tuple(ref.shape), "coo", pos=pos,
                               crd=[c.to(index_dtype) for c in idx], values=vals)
    return A, stored


def _stored_places(stored, shape, fmt):
    """The dense mask of what a coalesced tensor storing ``stored`` keeps in fmt: a dense
    level keeps every coordinate under a kept parent, a sparse one the stored prefixes."""
    order, levels = fmt.order, fmt.levels
    prefixes = [{tuple(c[d] for d in order[:k + 1]) for c in stored} for k in range(len(order))]
    mask = torch.zeros(shape, dtype=torch.bool)
    for c in np.ndindex(*shape):
        lc = tuple(c[d] for d in order)
        mask[c] = all(levels[k] == "dense" or lc[:k + 1] in prefixes[k]
                      for k in range(len(order)))
    return mask


def _kernels_take(fmt):
    """Generated kernels read no dense or compressed level under a non-unique one."""
    return all(fmt.unique[k - 1] or fmt.levels[k] == "singleton" for k in range(1, len(fmt.order)))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtid)
@pytest.mark.parametrize("source", ["dense", "torch_coo_dup", "coo_dup"])
@pytest.mark.parametrize("shape, kind, fmt", COALESCED_CASES)
def test_conversions_into_nonunique_levels_are_coalesced(shape, kind, fmt, source,
                                                         index_dtype):
    seed = seed_of("coalesced", shape, kind, source)
    ref = make_dense(shape, torch.float64, seed, kind)
    if source == "coo_dup":
        x, stored = _coo_with_duplicates(ref, index_dtype, seed)
        A = x.to_format(fmt)
        assert A.index_dtype == index_dtype
    else:
        x, stored = make_source(source, ref, seed)
        A = scorch.to_sparse(x, fmt, index_dtype=index_dtype)
    f = Format.parse(fmt, ref.dim())
    check_sparse(A, ref, fmt, index_dtype, stored)
    assert A.is_coalesced()
    C = A.coalesce()
    assert C.nnz == A.nnz and torch.equal(C.to_dense(), ref)
    B = A.to_format(fmt, drop_zeros=False)                 # into itself: nothing merges
    assert_arrays_equal(sparse_arrays(B), sparse_arrays(A))
    # ops against dense (softmax over what the format stores: padding of dense levels too)
    if ref.numel():
        assert torch.equal(A.max(), ref.max())
    assert torch.equal(torch.relu(A).to_dense(), torch.relu(ref))
    torch.testing.assert_close(A.sum(), ref.sum())
    mask = _stored_places(stored, shape, f)
    want = torch.softmax(ref.masked_fill(~mask, -float("inf")), -1).nan_to_num(0.0)
    torch.testing.assert_close(torch.softmax(A, -1).to_dense(), want.masked_fill(~mask, 0))
    if _kernels_take(f):
        s = A.sum(-1)
        torch.testing.assert_close(s.to_dense() if isinstance(s, scorch.SparseTensor) else s,
                                   ref.sum(-1))
        W = make_dense((shape[-1], 3), torch.float64, seed + 1, "full")
        torch.testing.assert_close(scorch.einsum("...k,kl->...l", A, W), ref @ W)


def test_a_nonunique_level_above_a_dense_one_stores_each_row_once():
    x = torch.tensor([[-1.0, -2.0]])
    A = scorch.to_sparse(x, "c(nonunique)d")
    assert A.nnz == 2 and torch.equal(A.values(), torch.tensor([-1.0, -2.0]))
    assert A.indices(0)[1].tolist() == [0]
    assert A.is_coalesced() and A.coalesce().nnz == 2
    assert A.max().item() == -1.0
    B = scorch.to_sparse(x[None], "c(nonunique)s(nonunique)d")
    assert B.nnz == 2 and B.is_coalesced() and B.max().item() == -1.0


@pytest.mark.parametrize("fmt,shape", [("c(nonunique)d", (1, 2)),
                                       ("c(nonunique)s(nonunique)d", (1, 1, 2)),
                                       (Format("c(nonunique)d", order=(1, 0)), (2, 1))])
def test_repeated_subtrees_over_a_dense_level_are_summed(fmt, shape):
    """from_components may repeat a coordinate of a nonunique level above a dense one: its
    dense coordinates restart, so the stored entries are not sorted across the repeats,
    and a conversion sorts them before summing (it took the last repeat)."""
    fmt = fmt if isinstance(fmt, Format) else Format.parse(fmt, len(shape))
    n = len(shape)
    crd = [torch.tensor([0, 0])] + [torch.tensor([0, 0]) if fmt.levels[k] == "singleton"
                                    else None for k in range(1, n)]
    pos = [torch.tensor([0, 2])] + [None] * (n - 1)
    A = scorch.from_components(shape, fmt, pos=pos, crd=crd,
                               values=torch.tensor([1.0, 2.0, 3.0, -5.0]))
    d = A.to_dense()
    assert torch.equal(d.reshape(-1), torch.tensor([4.0, -3.0]))
    assert not A.is_coalesced()
    C = A.coalesce()
    assert C.is_coalesced() and C.nnz == 2 and torch.equal(C.to_dense(), d)
    for op in (torch.relu, torch.abs, torch.amax, torch.amin, torch.linalg.vector_norm,
               lambda t: t ** 2):
        r = op(A)
        torch.testing.assert_close(r.to_dense() if isinstance(r, scorch.SparseTensor) else r,
                                   op(d))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtid)
def test_a_unique_singleton_over_a_dense_level_stores_what_csd_does(index_dtype):
    """c(nonunique)sd was refused (suggesting c(nonunique)s(nonunique)d, which padded a row
    per entry); entries equal through the singleton share its position, as in csd."""
    x = torch.tensor([[[-1.0, -2.0]]])
    A = scorch.to_sparse(x, "c(nonunique)sd", index_dtype=index_dtype)
    B = scorch.to_sparse(x, "csd", index_dtype=index_dtype)
    C = scorch.to_sparse(x, "c(nonunique)s(nonunique)d", index_dtype=index_dtype)
    assert_arrays_equal(sparse_arrays(A), sparse_arrays(B))
    assert_arrays_equal(sparse_arrays(C), sparse_arrays(B))
    # two rows of one i: a nonunique level above the singleton repeats i, csd cannot
    y = torch.zeros(2, 2, 3)
    y[0, 0, 0], y[0, 0, 1], y[0, 1, 2], y[1, 1, 0] = 1, 2, 3, 4
    A = scorch.to_sparse(y, "c(nonunique)sd", index_dtype=index_dtype)
    assert A.nnz == 9 and A.indices(0)[1].tolist() == [0, 0, 1]
    assert torch.equal(A.to_dense(), y)
    W = torch.arange(6.0).reshape(3, 2)
    torch.testing.assert_close(scorch.einsum("ijk,kl->ijl", A, W), y @ W)
    with pytest.raises(NotImplementedError, match="make the level above it nonunique"):
        scorch.to_sparse(y, "csd")


# ---- explicit zeros ---------------------------------------------------------------------

SPARSE_LEAF_2D = ["csr", "csc", "coo", "dcsr", "dcsc", "c(nonunique)s"]


def _with_explicit_zeros():
    """A torch COO (coalesced) with two explicit zeros among three nonzeros."""
    idx = torch.tensor([[0, 0, 1, 2, 3], [1, 4, 2, 0, 3]])
    vals = torch.tensor([5.0, 0.0, -2.0, 0.0, 7.0])
    return torch.sparse_coo_tensor(idx, vals, (4, 5), check_invariants=True).coalesce()


@pytest.mark.parametrize("fmt", SPARSE_LEAF_2D)
@pytest.mark.parametrize("source", ["torch_coo", "torch_csr", "torch_csc", "scipy_csr",
                                    "scipy_coo"])
def test_explicit_zeros_from_sparse_source_are_kept(source, fmt):
    x = _with_explicit_zeros()
    ref = x.to_dense()
    if source == "torch_csr":
        x = x.to_sparse_csr()
    elif source == "torch_csc":
        x = x.to_sparse_csc()
    elif source.startswith("scipy"):
        i = x.indices().numpy()
        coo = sp.coo_array((x.values().numpy(), (i[0], i[1])), shape=(4, 5))
        x = coo.tocsr() if source == "scipy_csr" else coo
        assert x.nnz == 5
    A = scorch.to_sparse(x, fmt)
    assert A.nnz == 5
    assert int((A.values() == 0).sum()) == 2
    assert torch.equal(A.to_dense(), ref)


@pytest.mark.parametrize("b", SPARSE_LEAF_2D)
@pytest.mark.parametrize("a", SPARSE_LEAF_2D)
def test_explicit_zeros_survive_to_format(a, b):
    """Conversions between formats with no dense padding keep explicit zeros."""
    x = _with_explicit_zeros()
    A = scorch.to_sparse(x, a)
    B = A.to_format(b)
    assert B.nnz == 5, (a, b, B)
    assert torch.equal(B.to_dense(), x.to_dense())


@pytest.mark.parametrize("fmt", SPARSE_LEAF_2D + ["csf"])
def test_zeros_from_dense_are_not_stored(fmt):
    x = _with_explicit_zeros().to_dense()
    A = scorch.to_sparse(x, fmt if fmt != "csf" else "dcsr")
    assert A.nnz == 3
    assert bool((A.values() != 0).all())


@pytest.mark.parametrize("src", ["dense", "cd"])
def test_padding_of_dense_levels_is_dropped(src):
    x = _with_explicit_zeros().to_dense()
    A = scorch.to_sparse(x, src)
    assert A.to_format("csr").nnz == 3
    assert A.to_format("coo").nnz == 3
    kept = A.to_format("coo", drop_zeros=False)
    assert kept.nnz == A.nnz
    assert torch.equal(kept.to_dense(), x)


def test_duplicates_summing_to_zero_stay_as_explicit_zero():
    idx = torch.tensor([[0, 0, 1], [1, 1, 0]])
    x = torch.sparse_coo_tensor(idx, torch.tensor([3.0, -3.0, 2.0]), (2, 2),
                                check_invariants=True)
    for fmt in SPARSE_LEAF_2D:
        A = scorch.to_sparse(x, fmt)
        assert A.nnz == 2
        assert torch.equal(A.to_dense(), torch.tensor([[0.0, 0.0], [2.0, 0.0]]))


# ---- to_torch / to_scipy ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fid)
@pytest.mark.parametrize("shape, kind", shape_params(SHAPES_2D))
def test_to_torch_default_layout(shape, kind, fmt, dtype):
    ref = make_dense(shape, dtype, seed_of("torch", shape), kind)
    A = scorch.to_sparse(ref, fmt)
    t = A.to_torch()
    name = Format.parse(fmt, 2).name
    want = {"csr": torch.sparse_csr, "csc": torch.sparse_csc}.get(name, torch.sparse_coo)
    assert t.layout is want
    assert t.dtype == dtype and t.shape == ref.shape
    if want is torch.sparse_coo:
        assert t.is_coalesced()
        c = t.coalesce()
        assert torch.equal(t._indices(), c._indices())  # really sorted, no duplicates
        assert torch.equal(t._values(), c._values())
    assert torch.equal(t.to_dense(), ref)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc],
                         ids=str)
@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fid)
def test_to_torch_layout(fmt, layout):
    ref = make_dense((7, 13), torch.float64, seed_of("layout"), "random")
    A = scorch.to_sparse(ref, fmt)
    before = sparse_arrays(A)
    t = A.to_torch(layout=layout)
    assert t.layout is layout
    assert torch.equal(t.to_dense(), ref)
    assert_arrays_equal(sparse_arrays(A), before)
    # The result owns its memory: writing it does not reach A.
    vals = t.values() if layout is not torch.sparse_coo else t._values()
    vals.add_(1)
    assert torch.equal(A.to_dense(), ref)


@pytest.mark.parametrize("fmt", ["dense", "csf", "coo", "dcc"])
def test_to_torch_3d_is_coalesced_coo(fmt):
    ref = make_dense((3, 4, 5), torch.float32, seed_of("t3"))
    t = scorch.to_sparse(ref, fmt).to_torch()
    assert t.layout is torch.sparse_coo and t.is_coalesced()
    assert torch.equal(t._indices(), t.coalesce()._indices())
    assert torch.equal(t.to_dense(), ref)


def test_to_torch_keeps_explicit_zeros_of_csr():
    x = _with_explicit_zeros()
    t = scorch.to_sparse(x, "csr").to_torch()
    assert t.layout is torch.sparse_csr and t._nnz() == 5
    assert torch.equal(t.to_dense(), x.to_dense())


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fid)
@pytest.mark.parametrize("shape, kind", shape_params(SHAPES_2D))
def test_to_scipy(shape, kind, fmt, dtype):
    ref = make_dense(shape, dtype, seed_of("scipy", shape), kind)
    A = scorch.to_sparse(ref, fmt)
    s = A.to_scipy()
    name = Format.parse(fmt, 2).name
    want = {"csr": sp.csr_array, "csc": sp.csc_array}.get(name, sp.coo_array)
    assert type(s) is want
    assert s.shape == tuple(shape)
    assert s.dtype == ref.numpy().dtype
    assert np.array_equal(s.toarray(), ref.numpy())
    # A copy: writing scipy's data does not reach A.
    s.data[...] = 99
    assert torch.equal(A.to_dense(), ref)


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 2, 3)], ids=str)
@pytest.mark.parametrize("fmt", ["dense", "csf", "coo"])
def test_to_scipy_nd_is_coo_array(shape, fmt):
    ref = make_dense(shape, torch.float64, seed_of("scipynd", shape))
    s = scorch.to_sparse(ref, fmt).to_scipy()
    assert type(s) is sp.coo_array
    assert s.shape == shape
    assert np.array_equal(s.toarray(), ref.numpy())


def test_scipy_round_trip():
    ref = make_dense((13, 7), torch.float32, seed_of("sciprt"))
    for fmt in ("csr", "csc", "coo"):
        s = scorch.to_sparse(ref, fmt).to_scipy()
        back = scorch.to_sparse(s, fmt)
        assert torch.equal(back.to_dense(), ref)


# ---- from_edge_index --------------------------------------------------------------------

def test_from_edge_index_defaults():
    ei = torch.tensor([[0, 1, 1, 3, 1], [1, 2, 2, 0, 2]])
    A = scorch.from_edge_index(ei)
    ref = torch.zeros(4, 4)
    ref[0, 1], ref[1, 2], ref[3, 0] = 1, 3, 1   # (1,2) appears three times: summed
    assert A.shape == (4, 4)           # num_nodes = max index + 1
    assert A.dtype == torch.float32
    assert A.format.name == "csr"
    assert A.nnz == 3
    assert torch.equal(A.to_dense(), ref)


def test_from_edge_index_num_nodes_and_values():
    ei = torch.tensor([[0, 2, 0], [2, 1, 2]], dtype=torch.int32)
    vals = torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64)
    ei_before, vals_before = ei.clone(), vals.clone()
    A = scorch.from_edge_index(ei, num_nodes=6, values=vals, format="coo",
                               index_dtype=torch.int64)
    ref = torch.zeros(6, 6, dtype=torch.float64)
    ref[0, 2] = 1.75
    ref[2, 1] = -2.0
    assert A.shape == (6, 6)
    assert A.dtype == torch.float64 and A.index_dtype == torch.int64
    assert A.format.name == "coo"
    check_sparse(A, ref, "coo", torch.int64, {(0, 2), (2, 1)})
    assert torch.equal(ei, ei_before) and torch.equal(vals, vals_before)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "dense"])
def test_from_edge_index_formats(fmt, rng):
    ei = torch.randint(0, 9, (2, 30), generator=rng)
    ref = torch.zeros(9, 9)
    ref.index_put_((ei[0], ei[1]), torch.ones(30), accumulate=True)
    A = scorch.from_edge_index(ei, num_nodes=9, format=fmt)
    assert torch.equal(A.to_dense(), ref)
    assert A.format == Format.parse(fmt, 2)


def test_from_edge_index_empty():
    A = scorch.from_edge_index(torch.zeros(2, 0, dtype=torch.int64))
    assert A.shape == (0, 0) and A.nnz == 0
    B = scorch.from_edge_index(torch.zeros(2, 0, dtype=torch.int64), num_nodes=3)
    assert B.shape == (3, 3) and B.nnz == 0
    assert torch.equal(B.to_dense(), torch.zeros(3, 3))


# ---- from_components --------------------------------------------------------------------

def _components(fmt, ref, it):
    """Level arrays of ``ref`` in ``fmt``, built independently of scorch."""
    if fmt == "csr":
        t = ref.to_sparse_csr()
        return [None, t.crow_indices().to(it)], [None, t.col_indices().to(it)], t.values()
    if fmt == "csc":
        t = ref.to_sparse_csc()
        return [None, t.ccol_indices().to(it)], [None, t.row_indices().to(it)], t.values()
    if fmt == "coo":
        t = ref.to_sparse().coalesce()
        i = t.indices().to(it)
        return [torch.tensor([0, i.shape[1]], dtype=it), None], [i[0].clone(),
                                                                 i[1].clone()], t._values()
    assert fmt == "csf"
    coords = sorted(nonzero_coords(ref))
    pos, crd = [], []
    parents = [()]
    for k in range(ref.dim()):
        p, c, nxt = [0], [], []
        for par in parents:
            kids = sorted({x[k] for x in coords if x[:k] == par})
            c += kids
            nxt += [par + (j,) for j in kids]
            p.append(len(c))
        pos.append(torch.tensor(p, dtype=it))
        crd.append(torch.tensor(c, dtype=it))
        parents = nxt
    vals = (torch.stack([ref[x] for x in coords]) if coords
            else torch.zeros(0, dtype=ref.dtype))
    return pos, crd, vals.contiguous()


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtid)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
@pytest.mark.parametrize("fmt, shape", [("csr", (7, 13)), ("csr", (6, 4)), ("csr", (0, 3)),
                                        ("csc", (13, 7)), ("csc", (6, 4)), ("coo", (7, 13)),
                                        ("coo", (4, 6)), ("csf", (3, 4, 5)),
                                        ("csf", (2, 3, 2))], ids=str)
def test_from_components(fmt, shape, dtype, index_dtype):
    kind = "zeros" if shape == (2, 3, 2) else ("empty_rows" if shape == (6, 4) else "random")
    ref = make_dense(shape, dtype, seed_of("fc", fmt, shape), kind)
    pos, crd, vals = _components(fmt, ref, index_dtype)
    before = ([None if p is None else p.clone() for p in pos],
              [None if c is None else c.clone() for c in crd], vals.clone())
    A = scorch.from_components(shape, fmt, pos=pos, crd=crd, values=vals)
    check_sparse(A, ref, fmt, index_dtype, nonzero_coords(ref))
    # Shared, not copied.
    assert A.values().data_ptr() == vals.data_ptr()
    for k in range(len(shape)):
        p, c = A.indices(k)
        assert (p is None) == (pos[k] is None) and (c is None) == (crd[k] is None)
        if p is not None:
            assert p.data_ptr() == pos[k].data_ptr()
        if c is not None:
            assert c.data_ptr() == crd[k].data_ptr()
    # Never written, whatever we do with A.
    A.to_format("dcsr" if len(shape) == 2 else "coo")
    A.to_torch()
    A.to_scipy()
    A.clone()
    assert_arrays_equal((pos, crd, vals), before)


def test_from_components_sees_the_callers_arrays():
    vals = torch.tensor([1.0, 2.0])
    A = scorch.from_components((2, 3), "csr", pos=[None, torch.tensor([0, 1, 2])],
                               crd=[None, torch.tensor([2, 0])], values=vals)
    vals[1] = 5.0      # the arrays are shared, like torch.sparse_csr_tensor
    assert torch.equal(A.to_dense(), torch.tensor([[0.0, 0.0, 1.0], [5.0, 0.0, 0.0]]))


def test_from_components_nonunique_coo_with_duplicates_sums():
    it = torch.int32
    A = scorch.from_components((2, 3), "coo", pos=[torch.tensor([0, 3], dtype=it), None],
                               crd=[torch.tensor([0, 1, 1], dtype=it),
                                    torch.tensor([2, 0, 0], dtype=it)],
                               values=torch.tensor([1.0, 2.0, 3.0]))
    assert A.nnz == 3
    assert torch.equal(A.to_dense(), torch.tensor([[0.0, 0.0, 1.0], [5.0, 0.0, 0.0]]))
    B = A.to_format("csr")
    assert B.nnz == 2 and torch.equal(B.to_dense(), A.to_dense())


# ---- values, indices, with_values, clone, repr ------------------------------------------

def test_values_and_indices():
    ref = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 4.0]])
    A = scorch.to_sparse(ref, "csr")
    assert torch.equal(A.values(), torch.tensor([2.0, 3.0, 4.0]))
    assert A.values() is A.values()           # the stored tensor, not a copy
    assert A.indices(0) == (None, None)
    p, c = A.indices(1)
    assert p.tolist() == [0, 1, 1, 3] and c.tolist() == [1, 0, 2]
    assert A.indices(-1)[1] is c

    C = scorch.to_sparse(ref, "coo")
    p0, c0 = C.indices(0)
    assert p0.tolist() == [0, 3] and c0.tolist() == [0, 2, 2]
    assert C.indices(1) == (None, C.indices(1)[1])
    assert C.indices(1)[1].tolist() == [1, 0, 2]

    D = scorch.to_sparse(ref, "dense")
    assert D.indices(0) == (None, None) and D.indices(1) == (None, None)
    assert torch.equal(D.values(), ref.reshape(-1))

    S = scorch.to_sparse(ref, "csc")
    p, c = S.indices(1)
    assert p.tolist() == [0, 1, 2, 3] and c.tolist() == [2, 0, 2]
    assert torch.equal(S.values(), torch.tensor([3.0, 2.0, 4.0]))


@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsc", "cd"])
def test_with_values(fmt):
    ref = make_dense((7, 13), torch.float32, seed_of("wv"))
    A = scorch.to_sparse(ref, fmt)
    before = sparse_arrays(A)
    new = torch.arange(A.nnz, dtype=torch.float64) + 1
    B = A.with_values(new)
    assert B.format == A.format and B.shape == A.shape and B.dtype == torch.float64
    assert B.values() is new
    assert B.nnz == A.nnz
    # Same pattern: B's dense nonzeros are where A stores values, in A's storage order.
    expect = A.to_dense(torch.float64)
    for k in range(2):
        assert A.indices(k)[0] is B.indices(k)[0] and A.indices(k)[1] is B.indices(k)[1]
    Bd = B.to_dense()
    Ad = A.with_values(torch.ones(A.nnz)).to_dense()
    assert torch.equal(Bd != 0, Ad != 0)
    assert torch.equal(A.to_dense(), ref)
    assert torch.equal(A.to_dense(torch.float64), expect)
    assert_arrays_equal(sparse_arrays(A), before)


def test_with_values_is_differentiable():
    A = scorch.to_sparse(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "csr")
    v = torch.tensor([3.0, 4.0], requires_grad=True)
    B = A.with_values(v)
    assert B.requires_grad
    assert B.values() is v


@pytest.mark.parametrize("fmt", ["csr", "coo", "csf"])
def test_clone_is_independent(fmt):
    shape = (3, 4, 5) if fmt == "csf" else (7, 13)
    ref = make_dense(shape, torch.float64, seed_of("clone", fmt))
    A = scorch.to_sparse(ref, fmt)
    B = A.clone()
    assert type(B) is scorch.SparseTensor
    assert B.format == A.format and B.nnz == A.nnz and B.index_dtype == A.index_dtype
    assert torch.equal(B.to_dense(), ref)
    assert B.values().data_ptr() != A.values().data_ptr()
    B.values().mul_(3)
    for arr in B._pos + B._crd:
        if arr is not None and arr.numel():
            arr.zero_()
    assert torch.equal(A.to_dense(), ref)
    C = torch.clone(A)       # through torch's dispatch too
    assert type(C) is scorch.SparseTensor
    assert C.values().data_ptr() != A.values().data_ptr()
    C.values().zero_()
    assert torch.equal(A.to_dense(), ref)


@pytest.mark.parametrize("fmt, dtype", [("csr", torch.float32), ("coo", torch.float64),
                                        ("dcsc", torch.float32), ("csf", torch.float64)],
                         ids=str)
def test_repr(fmt, dtype):
    shape = (2, 3, 4) if fmt == "csf" else (5, 6)
    A = scorch.to_sparse(make_dense(shape, dtype, seed_of("repr")), fmt)
    r = repr(A)
    assert r.startswith("SparseTensor(")
    assert fmt in r
    assert f"nnz={A.nnz}" in r
    assert str(dtype) in r
    assert str(A) == r


def test_detach_keeps_the_pattern():
    ref = make_dense((5, 6), torch.float32, seed_of("detach"))
    A = scorch.to_sparse(ref, "csr")
    D = A.detach()
    assert type(D) is scorch.SparseTensor and D.format == A.format
    assert torch.equal(D.to_dense(), ref)


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc", "dcsr"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_from_edge_index_keeps_the_values_gradient(fmt, dtype):
    """from_edge_index(values=v) with v requiring grad: each stored entry is the sum of
    the values of its edges (duplicates summed), and gradients reach v as through the
    dense adjacency (it used to come back detached, and backward failed)."""
    ei = torch.tensor([[0, 0, 1, 2, 0, 3], [1, 2, 2, 0, 1, 3]])    # (0, 1) twice
    v = torch.tensor([1.0, 2.0, -1.5, 0.5, 3.0, 4.0], dtype=dtype, requires_grad=True)
    X = torch.arange(8, dtype=dtype).reshape(4, 2) / 3
    G = scorch.from_edge_index(ei, 4, values=v, format=fmt)
    assert G.requires_grad and G.nnz == 5
    (G @ X).square().sum().backward()
    vd = v.detach().clone().requires_grad_()
    D = torch.zeros(4, 4, dtype=dtype).index_put((ei[0], ei[1]), vd, accumulate=True)
    (D @ X).square().sum().backward()
    torch.testing.assert_close(G.detach().to_dense(), D.detach())
    torch.testing.assert_close(v.grad, vd.grad)
    with torch.no_grad():
        assert not scorch.from_edge_index(ei, 4, values=v, format=fmt).requires_grad


def test_malformed_torch_compressed_tensors_are_refused():
    """torch builds CSR/CSC/BSR tensors unchecked unless asked: a wrong crow_indices is a
    ValueError naming it, by conversion and under scorch.enable(), never a wrong matrix."""
    import warnings

    def csr(crow):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.sparse_csr_tensor(torch.tensor(crow), torch.tensor([0, 2, 1]),
                                           torch.tensor([1., 2, 3]), (2, 3),
                                           check_invariants=False)
    for crow in ([0, 3], [0, 3, 2], [0, 2, 2], [1, 2, 3]):
        with pytest.raises(ValueError, match="crow_indices"):
            scorch.to_sparse(csr(crow))
        with scorch.enabled(), pytest.raises(ValueError, match="pos"):   # (level 1's)
            torch.mm(csr(crow), torch.ones(3, 2))
    good = csr([0, 2, 3])
    assert scorch.to_sparse(good).to_dense().tolist() == [[1., 0, 2], [0, 3, 0]]
    with scorch.enabled():
        torch.testing.assert_close(torch.mm(good, torch.ones(3, 2)),
                                   torch.tensor([[3., 3], [3, 3]]))
