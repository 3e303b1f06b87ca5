"""torch.sparse's accessors on a SparseTensor, against what torch answers for its layouts.

Code written for torch.sparse reads ``_nnz()``, ``crow_indices()``, ``indices()``,
``is_coalesced()`` and converts with ``to_sparse_csr()``; each must give torch's answer
for the matching format (or name the format it needs), and conversions stay scorch
tensors, differentiable w.r.t. the values.
"""
import numpy as np
import pytest
import torch

import scorch

from conftest import SHAPES_2D, make_dense, seed_of

FORMATS = ["csr", "csc", "coo", "dcsr", "dcsc", "dense", "cd"]


def _dense(sid, shape, kind, dtype=torch.float64):
    return make_dense(shape, dtype, seed_of("accessors", sid), kind)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
def test_counts_and_coordinates(fmt, sid, shape, kind):
    x = _dense(sid, shape, kind)
    A = scorch.to_sparse(x, fmt)
    assert A._nnz() == A.nnz == A.values().numel()
    assert (A.sparse_dim(), A.dense_dim()) == (2, 0)
    assert A.is_coalesced()
    idx = A.indices()
    assert idx.dtype == torch.int64 and tuple(idx.shape) == (2, A.nnz)
    # column e of indices() is the coordinate of values()[e]
    back = torch.sparse_coo_tensor(idx, A.values(), shape,
                                   check_invariants=True).to_dense()
    assert torch.equal(back, x)
    # torch's private COO accessors, which graph code calls (adj._values()); they were
    # shadowed by an attribute of that name (a TypeError)
    assert A._values() is A.values() and torch.equal(A._indices(), idx)
    assert torch.Tensor._values(A) is A.values()
    assert torch.equal(torch.Tensor._indices(A), idx)


@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
def test_compressed_arrays_are_torchs(sid, shape, kind):
    x = _dense(sid, shape, kind)
    R, C = scorch.to_sparse(x, "csr"), scorch.to_sparse(x, "csc")
    tr, tc = x.to_sparse_csr(), x.to_sparse_csc()
    assert torch.equal(R.crow_indices().long(), tr.crow_indices())
    assert torch.equal(R.col_indices().long(), tr.col_indices())
    assert torch.equal(C.ccol_indices().long(), tc.ccol_indices())
    assert torch.equal(C.row_indices().long(), tc.row_indices())
    assert R.crow_indices() is R.indices(1)[0]   # views of the arrays, as torch's are


@pytest.mark.parametrize("fmt", ["csc", "coo", "dcsr", "dense"])
def test_crow_indices_names_the_format_it_needs(fmt):
    A = scorch.to_sparse(torch.eye(3), fmt)
    for name, need in (("crow_indices", "csr"), ("col_indices", "csr")):
        with pytest.raises(RuntimeError, match=f"{name}\\(\\) needs a {need}.*{fmt}"):
            getattr(A, name)()
    B = scorch.to_sparse(torch.eye(3), "csr")
    with pytest.raises(RuntimeError, match="ccol_indices\\(\\) needs a csc.*csr"):
        B.ccol_indices()
    with pytest.raises(RuntimeError, match="row_indices\\(\\) needs a csc.*csr"):
        B.row_indices()


def _with_duplicates():
    # (0,1) stored twice (1 + 2), (1,2) once; sorted, as from_components requires
    return scorch.from_components(
        (2, 3), "coo", pos=[torch.tensor([0, 3]), None],
        crd=[torch.tensor([0, 0, 1]), torch.tensor([1, 1, 2])],
        values=torch.tensor([1.0, 2.0, 3.0]))


def test_coalesce_sums_duplicates_and_leaves_the_input():
    D = _with_duplicates()
    arrays = [t.clone() for t in D._pos + D._crd if t is not None]
    assert not D.is_coalesced()
    C = D.coalesce()
    assert C.is_coalesced() and C.format == D.format and C.nnz == 2
    assert torch.equal(C.indices(), torch.tensor([[0, 1], [1, 2]]))
    assert torch.equal(C.values(), torch.tensor([3.0, 3.0]))
    assert torch.equal(C.to_dense(), D.to_dense())
    assert torch.equal(D.values(), torch.tensor([1.0, 2.0, 3.0]))
    assert all(torch.equal(a, b) for a, b in
               zip(arrays, [t for t in D._pos + D._crd if t is not None]))
    assert C.coalesce() is C


def test_coalesce_is_differentiable():
    D = _with_duplicates()
    v = D.values().clone().requires_grad_()
    C = D.with_values(v).coalesce()
    (C.values() * torch.tensor([10.0, 100.0])).sum().backward()
    assert torch.equal(v.grad, torch.tensor([10.0, 10.0, 100.0]))


def test_softmax_over_duplicates_sums_them_first():
    """As torch.sparse.softmax: the duplicates are summed (coalesced) first."""
    A = _with_duplicates()
    S = torch.softmax(A, 1)
    want = torch.sparse.softmax(A.to_torch(), 1)
    assert S.nnz == want._nnz()
    torch.testing.assert_close(S.to_dense(), want.to_dense())


@pytest.mark.parametrize("src", FORMATS)
@pytest.mark.parametrize("method,kwargs,want", [
    ("to_sparse_csr", {}, "csr"), ("to_sparse_csc", {}, "csc"), ("to_sparse", {}, "coo"),
    ("to_sparse_coo", {}, "coo"), ("to_sparse", {"layout": torch.sparse_csr}, "csr"),
    ("to_sparse", {"layout": torch.sparse_csc}, "csc"),
    ("to_sparse", {"layout": torch.sparse_coo}, "coo")])
def test_to_sparse_layouts_give_scorch_formats(src, method, kwargs, want):
    x = _dense("to_sparse", (5, 7), "random", torch.float32)
    A = scorch.to_sparse(x, src)
    B = getattr(A, method)(**kwargs)
    assert isinstance(B, scorch.SparseTensor)
    assert B.format == scorch.Format.parse(want, 2)
    assert torch.equal(B.to_dense(), x)
    assert (B is A) == (src == want)   # as torch: already in that layout, the tensor itself


@pytest.mark.parametrize("call,what", [
    (lambda A: A.to_sparse(layout=torch.sparse_bsr), "layout=torch.sparse_bsr"),
    (lambda A: A.to_sparse(layout=torch.sparse_bsr, blocksize=(2, 2)), "layout"),
    (lambda A: A.to_sparse_csr(dense_dim=1), "dense_dim=1"),
    (lambda A: A.to_sparse(1), "sparse_dim=1")])
def test_to_sparse_refusals_name_the_argument(call, what):
    A = scorch.to_sparse(torch.eye(4), "csr")
    with pytest.raises(NotImplementedError, match=what.replace("(", "\\(")):
        call(A)


@pytest.mark.parametrize("src", FORMATS)
@pytest.mark.parametrize("dst", FORMATS)
def test_to_format_carries_the_gradient(src, dst):
    x = _dense("grad", (6, 5), "empty_rows")
    w = torch.arange(30, dtype=torch.float64).reshape(6, 5)
    A = scorch.to_sparse(x, src)
    v = A.values().clone().requires_grad_()
    B = A.with_values(v).to_format(dst)
    assert B.values().requires_grad
    (B.to_dense() * w).sum().backward()
    # d/dv of sum(w * dense): w at each coordinate B stores, 0 where B dropped an entry
    # (a dense source's padding zeros)
    kept = torch.zeros_like(w)
    kept[tuple(B.indices())] = 1
    assert torch.equal(v.grad, (w * kept)[tuple(A.indices())])


def test_one_element_tensors_give_python_numbers():
    import warnings

    import torch.nn.functional as F

    for x in (torch.tensor([[2.5]]), torch.zeros(1, 1), torch.tensor([[3]], dtype=torch.int32)):
        for fmt in ("csr", "coo"):
            A = scorch.to_sparse(x, fmt)
            assert A.item() == x.item() and type(A.item()) is type(x.item())
            assert (bool(A), float(A), int(A)) == (bool(x), float(x), int(x))
    A = scorch.from_components((1, 1), "coo", pos=[torch.tensor([0, 2]), None],
                               crd=[torch.tensor([0, 0]), torch.tensor([0, 0])],
                               values=torch.tensor([1., 2.]))
    assert A.item() == 3.0                                  # duplicates summed
    B = scorch.to_sparse(torch.eye(2), "csr")
    with pytest.raises(RuntimeError, match="4 elements"):
        B.item()
    with warnings.catch_warnings(record=True) as seen:      # F.softmax's implicit dim
        warnings.simplefilter("always")
        torch.testing.assert_close(F.softmax(B).to_dense(), torch.eye(2))
    assert any("Implicit dimension" in str(w.message) for w in seen)


def test_unbound_methods_run_the_sparse_tensors_own():
    """torch.Tensor.to_dense(A) reached aten's to_dense, which gave A itself back."""
    x = torch.tensor([[1., 0], [0, 2]])
    A = scorch.to_sparse(x, "coo")
    d = torch.Tensor.to_dense(A)
    assert type(d) is torch.Tensor and torch.equal(d, x)
    assert torch.equal(torch.Tensor.values(A), A.values())
    assert torch.equal(torch.Tensor.indices(A), A.indices())


@pytest.mark.parametrize("fmt,layout", [("csr", None), ("csc", None), ("coo", None),
                                        ("dcsr", torch.sparse_csr), ("csr", torch.sparse_csc)])
def test_to_torch_carries_the_gradient(fmt, layout):
    x = torch.tensor([[1., 0, 2], [0, 3, 0]])
    A = scorch.to_sparse(x, fmt).requires_grad_()
    w = torch.arange(6.).reshape(2, 3)
    (A.to_torch(layout).to_dense() * w).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), w * (x != 0))
    with torch.no_grad():
        assert not A.to_torch(layout).requires_grad


def test_format_orders_are_ints():
    assert scorch.Format("dc", order=(1, 0)) == scorch.Format("dc", order=[np.int64(1), 0])
    for order in ((1.5, 0), "10", 5):
        with pytest.raises(TypeError, match="sequence of ints"):
            scorch.Format("dc", order=order)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_sparse_mask_reads_a_dense_tensor_at_the_pattern(fmt):
    """``x.sparse_mask(M)``, torch.sparse's idiom: x at M's stored positions, in M's
    format, with x's gradient; repeated coordinates of M are one position."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    M = scorch.to_sparse(torch.rand(4, 5, generator=g) * (torch.rand(4, 5, generator=g) < 0.5),
                         fmt)
    R = x.sparse_mask(M)
    stored = torch.ones_like(M).to_dense() != 0
    assert isinstance(R, scorch.SparseTensor) and R.format == M.format
    assert torch.equal(R.to_dense(), x.detach() * stored)
    w = torch.randn(4, 5, dtype=torch.float64, generator=g)
    (R.to_dense() * w).sum().backward()
    assert torch.equal(x.grad, w * stored)
    with pytest.raises(RuntimeError, match=r"mask's shape \(4, 5\) must be x's \(5, 4\)"):
        x.detach().T.sparse_mask(M)
    D = scorch.from_components((2, 2), "coo", pos=[torch.tensor([0, 2]), None],
                               crd=[torch.tensor([1, 1]), torch.tensor([0, 0])],
                               values=torch.ones(2))
    assert torch.equal(torch.tensor([[1., 2.], [3., 4.]]).sparse_mask(D).to_dense(),
                       torch.tensor([[0., 0.], [3., 0.]]))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_equality_with_a_dense_tensor_or_a_scalar_is_dense_bool(fmt):
    """A == D, D == A, A != D, A == 0 as the dense tensor A stands for (the unstored places
    are zeros); repeated coordinates are summed first; two SparseTensors, or a dense
    operand of more dimensions, are refused."""
    x = torch.tensor([[1., 0, 2], [0, 0, 0], [4, 0, 5]])
    D = torch.tensor([[1., 0, 3], [0, 1, 0], [4, 0, 5]])
    A = scorch.to_sparse(x, fmt)
    for f in (lambda t: t == D, lambda t: D == t, lambda t: t != D, lambda t: t == 0,
              lambda t: t != 2, lambda t: t == D[0], lambda t: torch.eq(t, D),
              lambda t: torch.ne(t, 5.0)):
        got = f(A)
        assert type(got) is torch.Tensor and got.dtype == torch.bool
        assert torch.equal(got, f(x))
    C = scorch.from_components((1, 2), "coo", pos=[torch.tensor([0, 2]), None],
                               crd=[torch.tensor([0, 0]), torch.tensor([1, 1])],
                               values=torch.tensor([1.0, 2.0]))
    assert (C == torch.tensor([[0.0, 3.0]])).tolist() == [[True, True]]
    with pytest.raises(NotImplementedError, match="torch.eq"):
        A == A
    assert (A == None) is False and (A != None) is True   # noqa: E711 (as a dense tensor's)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "cd", "dense"])
def test_order_comparisons_are_dense_bool(fmt):
    """A < t, A.abs() >= t, t > A, torch.lt / le / gt / ge and their aliases against a
    scalar or a broadcast dense tensor: dense bool, the unstored places compared as zeros
    (a pruning threshold: ``A.abs() < t``); reflected operators flip the comparison."""
    x = torch.tensor([[1., 0, -2], [0, 3, 0], [-0.5, 0, 0]])
    D = torch.tensor([0.5, -1.0, 0.0])
    A = scorch.to_sparse(x, fmt)
    cases = [lambda t: t < 0.5, lambda t: t <= 0, lambda t: t > -1, lambda t: t >= D,
             lambda t: 0.5 > t, lambda t: D <= t, lambda t: t.abs() < 1.5,
             lambda t: torch.lt(t, D), torch.Tensor.less_equal, lambda t: torch.gt(t, 0),
             lambda t: t.greater_equal(-0.5), lambda t: torch.greater(t, D[None])]
    for f in cases:
        got = f(A) if f is not torch.Tensor.less_equal else f(A, 0)
        want = f(x) if f is not torch.Tensor.less_equal else f(x, 0)
        assert type(got) is torch.Tensor and got.dtype == torch.bool
        assert torch.equal(got, want)
    with pytest.raises(NotImplementedError, match="torch.lt"):
        A < A
    with pytest.raises(TypeError):
        A < None


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_equality_promotes_scalars_as_torch(dtype):
    """A Python number or a 0-D tensor compares in A's dtype kind (0.1 as float64 for a
    float64 A), as torch promotes; it compared with float32(0.1)."""
    x = torch.tensor([[0.1, 0.0, 0.3], [1.0, 0.0, 2.0]]).to(dtype)
    A = scorch.to_sparse(x, "csr")
    for other in (0.1, 1, 0.3, torch.tensor(0.1, dtype=torch.float64), torch.tensor(1)):
        assert torch.equal(A == other, x == other), other
        assert torch.equal(A != other, x != other), other
    with pytest.raises(NotImplementedError, match="does not broadcast"):
        A == torch.ones(2, 3, 3)
