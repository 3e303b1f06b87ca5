"""Reductions where the zeros a sparse tensor does not store count: amax / amin, max / min,
vector and Frobenius norms, count_nonzero.

Against the same reduction of the dense tensor in every format and shape (rows with no
entry, all-negative rows whose maximum is an implicit zero, empty tensors), duplicates
summed first, and gradients against dense autograd on inputs without ties.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import scorch

from conftest import SHAPES_2D, SHAPES_ND, make_dense, seed_of

FORMATS_2D = ["csr", "csc", "coo", "dcsr", "dense", "cd"]
INF = math.inf

REDUCTIONS = [
    ("max", lambda t: t.max()),
    ("min", lambda t: torch.min(t)),
    ("amax1", lambda t: torch.amax(t, 1)),
    ("amin0k", lambda t: t.amin(0, keepdim=True)),
    ("amax01", lambda t: torch.amax(t, (0, 1))),
    ("norm", lambda t: t.norm()),
    ("norm_dim", lambda t: torch.norm(t, dim=1)),
    ("norm_fro", lambda t: torch.norm(t, "fro", dim=0, keepdim=True)),
    ("l1_0", lambda t: torch.linalg.vector_norm(t, 1, dim=0)),
    ("l3_1", lambda t: torch.linalg.vector_norm(t, 3, dim=1, keepdim=True)),
    ("linf", lambda t: torch.linalg.vector_norm(t, INF)),
    ("linf_1", lambda t: torch.linalg.vector_norm(t, INF, dim=1)),
    ("lminf_1", lambda t: torch.linalg.vector_norm(t, -INF, dim=1)),
    ("l0_1", lambda t: torch.linalg.vector_norm(t, 0, dim=1)),
    ("linalg_norm", lambda t: torch.linalg.norm(t)),
    ("matrix_fro", lambda t: torch.linalg.matrix_norm(t)),
    ("count", lambda t: torch.count_nonzero(t)),
    ("count0", lambda t: t.count_nonzero(0)),
    ("norm_f64", lambda t: torch.linalg.vector_norm(t, dtype=torch.float64)),
]
# reductions that need every reduced group non-empty (torch raises on an empty one)
NEEDS_ENTRIES = {"max", "min", "amax1", "amin0k", "amax01", "linf", "linf_1", "lminf_1"}


def _signed(shape, dtype, seed, kind):
    """Small integers with rows that are all negative, so a maximum can be an implicit 0."""
    x = make_dense(shape, dtype, seed, kind)
    if x.dim() == 2 and x.shape[0] > 1:
        x[1] = -x[1].abs()
    return x


@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
@pytest.mark.parametrize("rid,op", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reduction_matches_dense(fmt, sid, shape, kind, rid, op):
    x = _signed(shape, torch.float32, seed_of("reduce", sid), kind)
    A = scorch.to_sparse(x, fmt)
    try:
        ref = op(x)
    except (IndexError, RuntimeError):
        assert rid in NEEDS_ENTRIES
        with pytest.raises(IndexError, match="empty dimension"):
            op(A)
        return
    r = op(A)
    assert type(r) is torch.Tensor and r.shape == ref.shape and r.dtype == ref.dtype
    torch.testing.assert_close(r, ref)


@pytest.mark.parametrize("fmt", ["csf", "coo", "dense"])
@pytest.mark.parametrize("sid,shape,kind", SHAPES_ND[:2], ids=[s[0] for s in SHAPES_ND[:2]])
def test_reductions_3d(fmt, sid, shape, kind):
    x = _signed(shape, torch.float64, seed_of("reduce3", sid), kind)
    A = scorch.to_sparse(x, fmt)
    for op in (lambda t: torch.amax(t, (0, 2)), lambda t: torch.norm(t, dim=(1, 2)),
               lambda t: t.count_nonzero((0, 1))):
        try:
            ref = op(x)
        except (IndexError, RuntimeError):
            continue
        torch.testing.assert_close(op(A), ref)


def test_duplicates_are_summed_first():
    # (0,1) stored as 2 and -2: a zero once summed; (1,2) holds 3
    D = scorch.from_components(
        (2, 3), "coo", pos=[torch.tensor([0, 3]), None],
        crd=[torch.tensor([0, 0, 1]), torch.tensor([1, 1, 2])],
        values=torch.tensor([2.0, -2.0, 3.0]))
    x = D.to_dense()
    assert int(torch.count_nonzero(D)) == 1
    torch.testing.assert_close(D.norm(), x.norm())
    torch.testing.assert_close(torch.amin(D, 1), torch.amin(x, 1))


@pytest.mark.parametrize("fmt", ["csr", "coo", "dense"])
def test_gradients_match_dense(fmt):
    g = torch.Generator().manual_seed(seed_of("reduce_grad", fmt))
    x = torch.randn(6, 5, dtype=torch.float64, generator=g)
    x[x.abs() < 0.6] = 0                         # distinct values: no ties
    x[1] = -x[1].abs() - 0.1                     # an all-negative row, fully stored
    x[3, :4] = -x[3, :4].abs() - 0.1             # all negative and one implicit zero
    x[3, 4] = 0
    ops = [lambda t: t.norm(), lambda t: torch.norm(t, dim=1).sum(),
           lambda t: torch.linalg.vector_norm(t, 3, dim=0).sum(),
           lambda t: torch.amax(t, 1).sum(), lambda t: torch.amin(t, 0).sum()]
    A = scorch.to_sparse(x, fmt).requires_grad_()
    xd = x.clone().requires_grad_()
    sum(op(A) for op in ops).backward()
    sum(op(xd) for op in ops).backward()
    stored = torch.zeros_like(x)
    stored[tuple(A.indices())] = 1
    torch.testing.assert_close(A.grad.to_dense(), xd.grad * stored)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("op,dim", [("amax", None), ("amax", 0), ("amax", 1), ("amin", 1),
                                    ("max", None), ("min", None)])
def test_stored_zero_ties_share_the_gradient_with_unstored_zeros(fmt, op, dim):
    """A stored zero that is a row's extreme ties with the row's zeros not stored: dense
    autograd splits the gradient among all of them, so the stored zero gets its share."""
    x = torch.tensor([[0., 0, 0], [0, -1, 0], [2, 0, 2], [-3, 0, -1], [0, 1, 0]],
                     dtype=torch.float64)
    stored = torch.zeros_like(x, dtype=torch.bool)
    stored[:, :2] = True
    stored[2, 2] = stored[4, 2] = True
    A = scorch.from_components(x.shape, "coo", pos=[torch.tensor([0, int(stored.sum())]), None],
                               crd=list(stored.nonzero().t()), values=x[stored])
    A = A.to_format(fmt).requires_grad_()
    xd = (x * stored).requires_grad_()
    w = torch.randn(() if dim is None else x.shape[1 - dim], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed_of("ties", op, dim)))
    red = (lambda t: getattr(torch, op)(t)) if dim is None else \
        (lambda t: getattr(torch, op)(t, dim))
    (red(A) * w).sum().backward()
    (red(xd) * w).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), xd.grad * stored)


@pytest.mark.parametrize("call,err,match", [
    (lambda A: A.max(1), NotImplementedError, "amax"),
    (lambda A: torch.max(A, A), NotImplementedError, "amax"),
    (lambda A: torch.norm(A, "nuc"), NotImplementedError, "'nuc'"),
    (lambda A: torch.linalg.norm(A, 2), NotImplementedError, "ord=2"),
    (lambda A: torch.linalg.vector_norm(A, -1), NotImplementedError, "negative order"),
    (lambda A: torch.amax(A, out=torch.empty(0)), NotImplementedError, "out="),
    (lambda A: torch.amax(A, 2), IndexError, "Dimension out of range"),
    (lambda A: A.mean(dtype=torch.int32), RuntimeError, "dtype= must be a floating"),
    (lambda A: torch.linalg.vector_norm(A, dtype=torch.float16), RuntimeError, "narrowing"),
    (lambda A: torch.linalg.matrix_norm(A, dtype=torch.bfloat16), RuntimeError, "narrowing"),
    (lambda A: torch.linalg.vector_norm(A.long(), dtype=torch.float32), RuntimeError,
     "floating point input"),
    (lambda A: A * torch.ones(3, 3, dtype=torch.complex64), NotImplementedError, "complex"),
    (lambda A: A + torch.ones(3, 3, dtype=torch.complex64), NotImplementedError, "complex"),
    (lambda A: torch.mul(A, 1 + 2j), NotImplementedError, "complex"),
    (lambda A: A / 1j, NotImplementedError, "complex"),
    (lambda A: A.index_select(0, torch.tensor([True, False, True])), IndexError,
     "integer tensor"),
])
def test_refusals(call, err, match):
    A = scorch.to_sparse(torch.eye(3), "csr")
    with pytest.raises(err, match=match):
        call(A)


@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("p,dim", [(1, 1), (2, 1), (2, 0), (INF, 1), (3, -1)])
def test_normalize_divides_by_the_slice_norms(fmt, p, dim):
    """F.normalize(A, p, dim): stays sparse in A's format; empty rows stay empty (eps);
    gradients against dense autograd."""
    x = _signed((6, 5), torch.float64, seed_of("normalize", fmt), "empty_rows")
    A = scorch.to_sparse(x, fmt).requires_grad_()
    R = torch.nn.functional.normalize(A, p=p, dim=dim)
    assert isinstance(R, scorch.SparseTensor) and R.format == A.format
    xd = x.clone().requires_grad_()
    ref = torch.nn.functional.normalize(xd, p=p, dim=dim)
    torch.testing.assert_close(R.to_dense(), ref.detach())
    w = torch.rand(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (R.to_dense() * w).sum().backward()
    (ref * w).sum().backward()
    stored = torch.zeros_like(x)
    stored[tuple(A.indices())] = 1
    torch.testing.assert_close(A.grad.to_dense(), xd.grad * stored)


def test_fuzz_found_reduction_cases():
    """A repeated dim is an error as torch's; the 0-"norm" takes part in autograd (zero
    gradient); matrix_norm of a 3-D tensor is a batch of norms over the last two dims."""
    x = _signed((3, 4), torch.float64, seed_of("reduce_fuzz"), "random")
    A = scorch.to_sparse(x, "csr")
    for op in (lambda t: t.sum((0, 0)), lambda t: torch.amax(t, (1, -1)),
               lambda t: torch.count_nonzero(t, (0, 0)),
               lambda t: torch.linalg.vector_norm(t, 2, (0, -2))):
        with pytest.raises(RuntimeError, match="appears multiple times"):
            op(A)
    A.requires_grad_()
    r = torch.linalg.vector_norm(A, 0, dim=1)
    assert r.requires_grad
    r.sum().backward()
    assert torch.equal(A.grad.values(), torch.zeros(A.nnz, dtype=torch.float64))
    y = _signed((2, 3, 4), torch.float64, seed_of("reduce_fuzz", 3), "random")
    B = scorch.to_sparse(y, "csf")
    torch.testing.assert_close(torch.linalg.matrix_norm(B), torch.linalg.matrix_norm(y))
    torch.testing.assert_close(torch.linalg.norm(B), torch.linalg.norm(y))


def test_linalg_norm_with_an_int_dim_is_a_vector_norm():
    x = _signed((4, 5), torch.float64, seed_of("linalg_norm_dim"), "random")
    A = scorch.to_sparse(x, "csr")
    for ord, dim in [(1, 1), (INF, 0), (3, -1)]:
        torch.testing.assert_close(torch.linalg.norm(A, ord, dim=dim),
                                   torch.linalg.norm(x, ord, dim=dim))
    v = scorch.to_sparse(x[0], "coo")
    torch.testing.assert_close(torch.linalg.norm(v, 1), torch.linalg.norm(x[0], 1))
    with pytest.raises(NotImplementedError, match="ord=1"):   # (a matrix norm)
        torch.linalg.norm(A, 1)


@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
def test_diagonal_matches_dense(fmt, sid, shape, kind):
    x = _signed(shape, torch.float64, seed_of("diagonal", sid), kind)
    A = scorch.to_sparse(x, fmt)
    for off in range(-shape[0] - 1, shape[1] + 2):
        assert torch.equal(A.diagonal(off), x.diagonal(off)), off
        assert torch.equal(torch.diagonal(A, off, 1, 0), torch.diagonal(x, off, 1, 0)), off
    assert torch.equal(torch.diag(A), torch.diag(x))
    assert torch.equal(torch.diag(A, diagonal=1), torch.diag(x, diagonal=1))


def test_diagonal_sums_duplicates_and_has_gradients():
    D = scorch.from_components(
        (2, 3), "coo", pos=[torch.tensor([0, 3]), None],
        crd=[torch.tensor([0, 0, 1]), torch.tensor([0, 0, 1])],
        values=torch.tensor([1.0, 2.0, 3.0], requires_grad=True))
    d = D.diagonal()
    assert torch.equal(d, torch.tensor([3.0, 3.0]))
    (d * torch.tensor([10.0, 100.0])).sum().backward()
    assert torch.equal(D.values().grad, torch.tensor([10.0, 10.0, 100.0]))
    with pytest.raises(NotImplementedError, match="torch.diag"):
        torch.diag(scorch.to_sparse(torch.ones(3), "coo"))


def test_diagonal_dims_as_torch():
    """Dimensions by keyword and counted from the end; out-of-range and identical ones
    raise torch's IndexError and RuntimeError."""
    x = torch.tensor([[0., 1, 0, 2], [5, 0, 0, 0], [3, 0, 7, 4]])
    A = scorch.to_sparse(x, "csr")
    for kw in [dict(offset=1, dim1=1, dim2=0), dict(dim1=-1, dim2=-2), dict(offset=-1)]:
        assert torch.equal(A.diagonal(**kw), x.diagonal(**kw)), kw
        assert torch.equal(torch.diagonal(A, **kw), torch.diagonal(x, **kw)), kw
    assert torch.equal(A.diag(diagonal=1), x.diag(diagonal=1))
    for args, err, match in [((0, 2, 3), IndexError, "dim 2 is out of range"),
                             ((0, 0, -3), IndexError, "dim -3 is out of range"),
                             ((0, 0, 0), RuntimeError, "cannot be identical 0, 0"),
                             ((0, -2, 0), RuntimeError, "cannot be identical -2, 0")]:
        with pytest.raises(err):
            x.diagonal(*args)
        with pytest.raises(err, match=match):
            A.diagonal(*args)
    with pytest.raises(IndexError):   # (a vector has no dim 1)
        scorch.to_sparse(torch.ones(3), "coo").diagonal()
    with pytest.raises(RuntimeError, match="Supports 1D or 2D"):
        torch.diag(scorch.to_sparse(torch.ones(2, 2, 2), "csf"))
    with pytest.raises(NotImplementedError, match="torch.diagonal"):
        scorch.to_sparse(torch.ones(2, 2, 2), "csf").diagonal()
    with pytest.raises(NotImplementedError, match=r"torch.diag\(out=\)"):
        torch.diag(A, out=torch.empty(3))


def test_norms_over_a_dimension_keep_nan_and_half_range():
    nan = math.nan
    x = torch.tensor([[1., nan, 0.], [3., 0., 4.]])
    for fmt in ("csr", "coo", "csc"):
        A = scorch.to_sparse(x, fmt)
        torch.testing.assert_close(torch.linalg.vector_norm(A, 2, dim=1),
                                   torch.linalg.vector_norm(x, 2, dim=1), equal_nan=True)
        torch.testing.assert_close(torch.norm(A, p=1, dim=0), torch.norm(x, p=1, dim=0),
                                   equal_nan=True)
    x3 = torch.tensor([[[nan, 0.], [0., 1.]], [[2., 0.], [0., 0.]]])
    torch.testing.assert_close(torch.linalg.matrix_norm(scorch.to_sparse(x3, "csf")),
                               torch.linalg.matrix_norm(x3), equal_nan=True)
    # float16: powers, sums and roots in float32, rounded once (no overflow, no underflow)
    for h in (torch.tensor([[300., 400.]]), torch.tensor([[1e-4, 1e-4]]),
              torch.tensor([[60000., 60000.]])):
        h = h.half()
        H = scorch.to_sparse(h, "csr")
        torch.testing.assert_close(torch.linalg.vector_norm(H, dim=1),
                                   torch.linalg.vector_norm(h, dim=1))
        torch.testing.assert_close(H.mean(1), h.mean(1))
        torch.testing.assert_close(H.mean(), h.mean())
    h = torch.tensor([[300., 400.]]).half()
    torch.testing.assert_close(F.normalize(scorch.to_sparse(h, "csr"), dim=1).to_dense(),
                               F.normalize(h, dim=1))


@pytest.mark.parametrize("fmt", ["dense", "cd", "csr"])
def test_fractional_norm_gradient_at_a_stored_zero(fmt):
    x = torch.tensor([[0., 4., 9.], [1., 0., 0.]], dtype=torch.float64)
    A = scorch.to_sparse(x, fmt)
    if fmt == "csr":   # an explicit zero stored
        A = scorch.from_components((2, 3), "csr", pos=[None, torch.tensor([0, 3, 4])],
                                   crd=[None, torch.tensor([0, 1, 2, 0])],
                                   values=torch.tensor([0., 4., 9., 1.], dtype=torch.float64))
    v = A.values().detach().clone().requires_grad_()
    torch.linalg.vector_norm(A.with_values(v), 0.5, dim=1).sum().backward()
    xd = x.clone().requires_grad_()
    torch.linalg.vector_norm(xd, 0.5, dim=1).sum().backward()
    torch.testing.assert_close(A.with_values(v.grad).to_dense(),
                               xd.grad * (A.to_dense() != 0) + 0 * xd.grad)
    assert not v.grad.isnan().any()
