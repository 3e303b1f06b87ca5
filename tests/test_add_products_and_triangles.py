"""torch.addmv and torch.baddbmm with a SparseTensor (beta * input + alpha * product),
torch.sparse.mm's reduce= ("mean", "amax", "amin" over each row's stored entries),
torch.tril / torch.triu of a SparseTensor (the stored entries on one side of a diagonal,
in the tensor's format) and the *_like factories, against torch."""
import pytest
import torch

import scorch
from conftest import coo_pair_with_duplicates, make_dense, seed_of

FORMATS = ["csr", "csc", "coo", "dcsr", "dcsc", "dense", "cd"]
DTYPES = [torch.float32, torch.float64, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2), (0, 3), (2, 0)])
def test_addmv(beta, alpha, fmt, dtype):
    if not dtype.is_floating_point:
        beta, alpha = int(beta * 2), int(alpha)
    s = seed_of("addmv", fmt, dtype, beta, alpha)
    x = make_dense((5, 4), dtype, s)
    A = scorch.to_sparse(x, fmt)
    v = make_dense((4,), dtype, s + 1, "full")
    b = make_dense((5,), dtype, s + 2, "full")
    got = torch.addmv(b, A, v, beta=beta, alpha=alpha)
    assert not isinstance(got, scorch.SparseTensor)
    torch.testing.assert_close(got, torch.addmv(b, x, v, beta=beta, alpha=alpha))
    torch.testing.assert_close(b.addmv(A, v), b.addmv(x, v))


def test_addmv_ignores_input_where_beta_is_zero():
    A = scorch.to_sparse(make_dense((3, 3), torch.float64, 1), "csr")
    b = torch.full((3,), float("nan"), dtype=torch.float64)
    v = torch.ones(3, dtype=torch.float64)
    assert not torch.isnan(torch.addmv(b, A, v, beta=0)).any()


def test_addmv_gradients():
    x = make_dense((5, 4), torch.float64, 3)
    A = scorch.to_sparse(x, "csr").requires_grad_()
    v = make_dense((4,), torch.float64, 4, "full").requires_grad_()
    b = make_dense((5,), torch.float64, 5, "full").requires_grad_()
    xr = x.clone().requires_grad_()
    vr, br = v.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    w = torch.arange(1.0, 6.0, dtype=torch.float64)
    (torch.addmv(b, A, v, beta=0.5, alpha=2) * w).sum().backward()
    (torch.addmv(br, xr, vr, beta=0.5, alpha=2) * w).sum().backward()
    torch.testing.assert_close(A.grad._vals, xr.grad[tuple(A.indices())])
    torch.testing.assert_close(v.grad, vr.grad)
    torch.testing.assert_close(b.grad, br.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inp_shape", [(2, 3, 4), (3, 4), (4,)])
def test_baddbmm(inp_shape, dtype):
    s = seed_of("baddbmm", inp_shape, dtype)
    x = make_dense((2, 3, 5), dtype, s)
    B = scorch.to_sparse(x, "csf")
    Y = make_dense((2, 5, 4), dtype, s + 1, "full")
    inp = make_dense(inp_shape, dtype, s + 2, "full")
    got = torch.baddbmm(inp, B, Y, beta=2, alpha=3)
    torch.testing.assert_close(got, torch.baddbmm(inp, x, Y, beta=2, alpha=3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (5, 5), (1, 1), (0, 3)])
def test_tril_triu(shape, fmt, dtype):
    x = make_dense(shape, dtype, seed_of("tri", shape, fmt, dtype))
    A = scorch.to_sparse(x, fmt)
    for k in range(-6, 7):
        lo, up = torch.tril(A, k), A.triu(k)
        # (a's format; a dense last level becomes compressed: the kept places only)
        want = A.format if A.format.kinds[-1] != 0 else scorch.Format(
            A.format.text[:-1] + "c", order=A.format.order)
        assert lo.format == want and up.format == want
        for r, keep in ((lo, x.tril(k)), (up, x.triu(k))):
            stored = set(map(tuple, r.indices().t().tolist()))
            assert all(keep[p] != 0 or A.to_dense()[p] == 0 for p in stored)
            assert stored == {p for p in map(tuple, A.indices().t().tolist())
                              if (p[1] - p[0] <= k if r is lo else p[1] - p[0] >= k)}
        assert torch.equal(lo.to_dense(), x.tril(k)), k
        assert torch.equal(up.to_dense(), x.triu(k)), k
    assert torch.equal(A.tril(diagonal=1).to_dense(), x.tril(1))
    assert torch.equal(A.to_dense(), x)          # the input is unchanged


@pytest.mark.parametrize("fmt", ["csf", "coo", "dcc"])
def test_tril_of_a_batch_takes_the_last_two_dimensions(fmt):
    x = make_dense((2, 4, 5), torch.float32, 9)
    A = scorch.to_sparse(x, fmt)
    assert torch.equal(A.tril(-1).to_dense(), x.tril(-1))
    assert torch.equal(A.triu(2).to_dense(), x.triu(2))


def test_tril_sums_duplicates_and_has_gradients():
    ref = make_dense((5, 5), torch.float64, 10)
    _, A = coo_pair_with_duplicates(ref, 4, torch.float64)
    assert torch.equal(A.tril().to_dense(), ref.tril())
    x = make_dense((5, 5), torch.float64, 11)
    B = scorch.to_sparse(x, "csr").requires_grad_()
    xr = x.clone().requires_grad_()
    w = torch.arange(25.0, dtype=torch.float64).reshape(5, 5)
    (B.triu(1).to_dense() * w).sum().backward()
    (xr.triu(1) * w).sum().backward()
    torch.testing.assert_close(B.grad._vals, xr.grad[tuple(B.indices())])


def test_tril_of_a_vector_is_refused():
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.tril(scorch.to_sparse(torch.ones(3), "c"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_like_factories(fmt):
    """zeros_like stores nothing; ones_like, full_like and empty_like keep the pattern
    (as for torch's CSR tensors); each a SparseTensor in the input's format and shape."""
    x = make_dense((4, 5), torch.float32, 12)
    A = scorch.to_sparse(x, fmt)
    z = torch.zeros_like(A)
    assert isinstance(z, scorch.SparseTensor) and z.format == A.format
    assert torch.equal(z.to_dense(), torch.zeros(4, 5))
    assert fmt == "dense" or z.nnz == 0
    o = torch.ones_like(A, dtype=torch.float64)
    assert o.dtype == torch.float64 and o.format == A.format
    stored = torch.zeros(4, 5, dtype=torch.float64)
    stored[tuple(A.indices())] = 1.0             # (a dense level stores its zeros too)
    assert torch.equal(o.to_dense(), stored)
    f = torch.full_like(A, 2.5)
    assert torch.equal(f.to_dense(), o.to_dense().float() * 2.5)
    e = torch.empty_like(A)
    assert e.nnz == A.nnz and e.shape == A.shape and e.format == A.format
    assert torch.zeros_like(A, requires_grad=True).requires_grad
    assert torch.equal(A.to_dense(), x)
    with pytest.raises(NotImplementedError, match="CPU"):
        torch.ones_like(A, device="meta")
    with pytest.raises(NotImplementedError, match="SparseTensor like the input"):
        torch.ones_like(A, layout=torch.sparse_csr)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "max", "min"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "cd"])
@pytest.mark.parametrize("shape", [(7, 5), (1, 1), (0, 3), (4, 0)])
def test_sparse_mm_reduce_as_torch_csr(shape, fmt, reduce):
    """torch.sparse.mm(A, X, reduce=...) against torch's CSR kernel on the same matrix
    (rows without entries give 0; "mean" divides by the row's stored entries)."""
    x = make_dense(shape, torch.float64, seed_of("reduce", shape, fmt, reduce), "empty_rows"
                   if shape[0] > 2 else "random")
    A = scorch.to_sparse(x, fmt)
    stored = torch.zeros(shape, dtype=torch.bool)
    stored[tuple(A.indices())] = True
    X = torch.randn(shape[1], 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    # torch's CSR of the same stored entries (a dense level stores zeros too)
    ref_A = torch.sparse_coo_tensor(A.indices(), A.values().detach(), shape).coalesce()
    want = torch.sparse.mm(ref_A.to_sparse_csr(), X, reduce=reduce)
    got = torch.sparse.mm(A, X, reduce=reduce)
    assert not isinstance(got, scorch.SparseTensor)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("reduce", ["mean", "amax", "amin"])
def test_sparse_mm_reduce_gradients(reduce):
    x = make_dense((6, 5), torch.float64, 21) * torch.rand(6, 5, dtype=torch.float64)
    A = scorch.to_sparse(x, "csr").requires_grad_()
    X = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    T = x.to_sparse_csr().requires_grad_()
    Xr = X.detach().clone().requires_grad_()
    w = torch.arange(18.0, dtype=torch.float64).reshape(6, 3)
    (torch.sparse.mm(A, X, reduce=reduce) * w).sum().backward()
    (torch.sparse.mm(T, Xr, reduce=reduce) * w).sum().backward()
    torch.testing.assert_close(A.grad._vals, T.grad.values())
    torch.testing.assert_close(X.grad, Xr.grad)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("fmt", ["csr", "coo", "cd"])
def test_sparse_mm_reduce_ties_give_the_first_entry_the_gradient(fmt, reduce):
    """A row's products that tie for its extreme (an unweighted graph over features with
    repeated values: ReLU's zeros) give the whole gradient to the first stored entry, as
    torch's CSR kernel does (and PyG's scatter max); into A's values too, and under
    create_graph the gradient is itself differentiable."""
    g = torch.Generator().manual_seed(3)
    m = (torch.rand(6, 5, generator=g) < 0.6).double()
    m[2] = 0                                                    # a row with no entries
    X = torch.randint(-1, 2, (5, 3), generator=g).double().relu().requires_grad_()
    A = scorch.to_sparse(m, fmt).requires_grad_()
    w = torch.arange(18.0, dtype=torch.float64).reshape(6, 3) + 1
    out = torch.sparse.mm(A, X, reduce=reduce)
    gA, gX = torch.autograd.grad((out * w).sum(), (A, X), create_graph=True)
    stored = torch.zeros(6, 5, dtype=torch.bool)
    stored[tuple(A.indices())] = True
    Md, Xd = m.clone().requires_grad_(), X.detach().clone().requires_grad_()
    prod = Md[:, :, None] * Xd[None]
    far = float("-inf") if reduce == "amax" else float("inf")
    pick = torch.argmax if reduce == "amax" else torch.argmin   # (the first of equals)
    first = pick(torch.where(stored[:, :, None], prod, far), 1, keepdim=True)
    want = prod.gather(1, first)[:, 0] * stored.any(1, keepdim=True)
    wA, wX = torch.autograd.grad((want * w).sum(), (Md, Xd), create_graph=True)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(gX, wX)
    torch.testing.assert_close(gA.to_dense(), wA * stored)
    assert (want == 0).sum() > 3   # (ties at 0 are there to break)
    # torch's own CSR kernel over the same stored entries agrees
    T = torch.sparse_coo_tensor(A.indices(), A.values().detach(), (6, 5)).coalesce()
    T = T.to_sparse_csr().requires_grad_()
    Xt = X.detach().clone().requires_grad_()
    (torch.sparse.mm(T, Xt, reduce=reduce) * w).sum().backward()
    torch.testing.assert_close(gX, Xt.grad)
    torch.testing.assert_close(gA.values(), T.grad.values())
    # second order: d/dX of <gA, 1> (products are bilinear: the mixed term survives)
    h, = torch.autograd.grad(gA.values().sum(), X)
    hw, = torch.autograd.grad((wA * stored).sum(), Xd)
    torch.testing.assert_close(h, hw)


def test_sparse_mm_reduce_result_can_be_written_in_place():
    """GraphSAGE's h = relu_(sparse.mm(A, X, "amax")): the backward does not read the
    result, so an in-place write to it does not break it."""
    x = make_dense((6, 5), torch.float64, 31)
    A = scorch.to_sparse(x, "csr").requires_grad_()
    X = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    h = torch.sparse.mm(A, X, reduce="amax")
    torch.relu_(h)
    h.sum().backward()
    T = x.to_sparse_csr().requires_grad_()
    Xr = X.detach().clone().requires_grad_()
    torch.sparse.mm(T, Xr, reduce="amax").relu().sum().backward()
    torch.testing.assert_close(X.grad, Xr.grad)


def test_sparse_mm_reduce_with_duplicates_sums_them_first():
    ref = make_dense((5, 4), torch.float64, 22)
    _, A = coo_pair_with_duplicates(ref, 3, torch.float64)
    X = torch.randn(4, 2, dtype=torch.float64)
    for reduce in ("mean", "amax", "amin"):
        coalesced = A.coalesce()
        want = torch.sparse.mm(torch.sparse_coo_tensor(coalesced.indices(), coalesced.values(),
                                                       (5, 4)).to_sparse_csr(), X, reduce=reduce)
        torch.testing.assert_close(torch.sparse.mm(A, X, reduce=reduce), want)


def test_sparse_mm_reduce_errors():
    A = scorch.to_sparse(make_dense((3, 4), torch.float32, 23), "csr")
    with pytest.raises(ValueError, match="reduce must be"):
        torch.sparse.mm(A, torch.ones(4, 2), reduce="prod")
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.sparse.mm(A, torch.ones(3, 2), reduce="mean")
    with pytest.raises(NotImplementedError, match="a dense matrix"):
        torch.sparse.mm(A, A.t(), reduce="amax")
    I = scorch.to_sparse(make_dense((3, 4), torch.int64, 24), "csr")
    with pytest.raises(TypeError, match="floating-point"):
        torch.sparse.mm(I, torch.ones(4, 2, dtype=torch.int64), reduce="mean")
    r = torch.sparse.mm(I, torch.ones(4, 2, dtype=torch.int64), reduce="amax")
    assert r.dtype == torch.int64


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_matrix_power(fmt):
    """torch.linalg.matrix_power / torch.matrix_power of a sparse matrix: sparse products
    by squaring, the identity for 0, a copy for 1, gradients on the pattern; a negative
    power and a non-square matrix raise (it had been refused through aten.mm)."""
    x = make_dense((6, 6), torch.float64, seed_of("matrix_power", fmt))
    A = scorch.to_sparse(x, fmt).requires_grad_()
    for n in range(6):
        r = torch.linalg.matrix_power(A, n)
        assert isinstance(r, scorch.SparseTensor)
        torch.testing.assert_close(r.to_dense(), torch.linalg.matrix_power(x, n))
    assert torch.matrix_power(A, 1) is not A and A.matrix_power(2).shape == (6, 6)
    torch.linalg.matrix_power(A, 3).to_dense().sum().backward()
    d = x.clone().requires_grad_()
    torch.linalg.matrix_power(d, 3).sum().backward()
    stored = torch.zeros_like(x, dtype=torch.bool)
    stored[tuple(A.indices())] = True
    torch.testing.assert_close(A.grad.to_dense(), d.grad * stored)
    with pytest.raises(NotImplementedError, match="negative power"):
        torch.linalg.matrix_power(A, -1)
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.matrix_power(scorch.to_sparse(torch.ones(2, 3), fmt), 2)
