"""bfloat16 and float16 values: stored in their dtype, computed in float32 (every kernel
reads a float32 copy and its result is rounded once), the way ATen's CPU kernels
accumulate half types.

Values are small integers, so every float32 result is exact in any summation order: a
scorch result must then equal the float32 dense reference rounded once to the half dtype,
bit for bit.  Against torch's own half-dtype dense op the comparison uses torch's default
tolerances for that dtype.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

import scorch
from conftest import SHAPES_2D, coo_pair_with_duplicates, make_dense, seed_of

HALF = (torch.bfloat16, torch.float16)
FORMATS = ("csr", "csc", "coo", "dcsr", "dense")


def _ids(dt):
    return str(dt).split(".")[1]


def exact(got, want_f32, dtype):
    """got (dense or SparseTensor) is want_f32 rounded once to dtype."""
    if isinstance(got, scorch.SparseTensor):
        got = got.to_dense()
    assert got.dtype == dtype
    assert torch.equal(got, want_f32.to(dtype)), (got, want_f32)


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
def test_convert_and_products(dtype, fmt, sid, shape, kind):
    s = seed_of("half", sid, fmt, _ids(dtype))
    x32 = make_dense(shape, torch.float32, s, kind)
    x = x32.to(dtype)
    before = x.clone()
    A = scorch.to_sparse(x, fmt)
    assert A.dtype == dtype and A.values().dtype == dtype
    assert A.nnz == int(torch.count_nonzero(x)) or fmt == "dense"
    exact(A, x32, dtype)
    n, m = shape
    X32 = make_dense((m, 3), torch.float32, s + 1, "full")
    v32 = make_dense((m,), torch.float32, s + 2, "full")
    exact(A @ X32.to(dtype), x32 @ X32, dtype)
    exact(torch.mv(A, v32.to(dtype)), x32 @ v32, dtype)
    exact(torch.mm(A, X32.to(dtype)), x32 @ X32, dtype)
    W32 = make_dense((4, m), torch.float32, s + 3, "full")
    exact(F.linear(W32.to(dtype), A), W32 @ x32.T, dtype)
    U32 = make_dense((n, 2), torch.float32, s + 4, "full")
    V32 = make_dense((m, 2), torch.float32, s + 5, "full")
    S = torch.einsum("ij,ik,jk->ij", A, U32.to(dtype), V32.to(dtype))
    exact(S, x32 * (U32 @ V32.T), dtype)
    B = scorch.to_sparse(x.T.contiguous(), fmt)
    exact(A @ B, x32 @ x32.T, dtype)
    exact(A + A, 2 * x32, dtype)
    exact(A * A, x32 * x32, dtype)
    exact(A * 3, 3 * x32, dtype)
    exact(A.sum(1), x32.sum(1), dtype)
    exact(A.t(), x32.T, dtype)
    if fmt != "dense":
        exact(A.to_format("csc" if fmt != "csc" else "coo"), x32, dtype)
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
def test_against_torch_half_ops(dtype):
    """Random (not integer) values against torch's own dense op in that dtype."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 30, generator=g)
    x[torch.rand(40, 30, generator=g) < 0.7] = 0
    x = x.to(dtype)
    X = torch.randn(30, 16, generator=g).to(dtype)
    A = scorch.to_sparse(x, "csr")
    torch.testing.assert_close(A @ X, x @ X)
    torch.testing.assert_close((A @ A.t()).to_dense(), x @ x.T)
    torch.testing.assert_close(torch.softmax(A, 1).to_dense(),
                               torch.sparse.softmax(x.float().to_sparse(), 1)
                               .to_dense().to(dtype))


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
@pytest.mark.parametrize("fmt", ("csr", "coo"))
def test_duplicates_summed_in_float32(dtype, fmt):
    ref = make_dense((6, 5), torch.float32, seed_of("half-dup", fmt), "random")
    t, B = coo_pair_with_duplicates(ref, seed_of("half-dup", fmt), dtype)
    A = scorch.to_sparse(t, fmt)
    assert A.dtype == dtype
    exact(A, ref, dtype)
    # a tensor storing duplicates (from_components, sorted) multiplies them in
    X = make_dense((5, 3), torch.float32, 11, "full")
    exact(B @ X.to(dtype), ref @ X, dtype)


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
def test_duplicates_are_summed_before_rounding(dtype):
    """1 + u + u where 1 + u rounds back to 1 in the half dtype but 1 + 2u does not: the
    products must sum a coordinate's duplicates in float32 (the kernels' converted copy
    of a coo is float32), not round each partial sum."""
    u = 2.0 ** (-8 if dtype == torch.bfloat16 else -11)
    A = scorch.from_components((1, 2), "coo", pos=[torch.tensor([0, 3]), None],
                               crd=[torch.tensor([0, 0, 0]), torch.tensor([0, 0, 1])],
                               values=torch.tensor([1.0, u, u], dtype=dtype))
    want = torch.tensor([[1.0 + u, u]])                # exact in float32
    one = torch.ones(2, 1, dtype=dtype)
    exact(A @ one, want @ one.float(), dtype)
    exact(torch.mv(A, one[:, 0]), want @ one[:, 0].float(), dtype)
    exact(A.sum(1), want.sum(1), dtype)
    exact(scorch.einsum("ij,jk->ik", A, one), want @ one.float(), dtype)
    exact(A @ A.t(), want @ want.T, dtype)
    assert (A @ one).item() != 1.0


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
def test_autograd(dtype):
    x32 = make_dense((7, 5), torch.float32, seed_of("half-grad"), "random")
    X32 = make_dense((5, 3), torch.float32, seed_of("half-grad", 1), "full")
    A = scorch.to_sparse(x32.to(dtype), "csr").requires_grad_()
    X = X32.to(dtype).requires_grad_()
    (A @ X).sum().backward()
    xd, Xd = x32.clone().requires_grad_(), X32.clone().requires_grad_()
    (xd @ Xd).sum().backward()
    assert isinstance(A.grad, scorch.SparseTensor) and A.grad.dtype == dtype
    exact(A.grad, xd.grad * (x32 != 0), dtype)
    exact(X.grad, Xd.grad, dtype)
    # SDDMM's gradients for the dense operands
    U = make_dense((7, 2), torch.float32, 3, "full").to(dtype).requires_grad_()
    V = make_dense((5, 2), torch.float32, 4, "full").to(dtype).requires_grad_()
    torch.einsum("ij,ik,jk->ij", A.detach(), U, V).sum().backward()
    Ud, Vd = U.detach().float().requires_grad_(), V.detach().float().requires_grad_()
    (x32 * (Ud @ Vd.T)).sum().backward()
    exact(U.grad, Ud.grad, dtype)
    exact(V.grad, Vd.grad, dtype)


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
def test_add_products_round_once(dtype):
    """addmm / addmv / baddbmm / F.linear with a bias / add with alpha compute the product
    and the sum in float32 and round once, as torch's half ops do (the product rounded
    and then added differed from torch's in 1-4 % of the entries)."""
    g = torch.Generator().manual_seed(7)
    a = (torch.randn(40, 300, generator=g) * (torch.rand(40, 300, generator=g) < 0.3)).to(dtype)
    X = torch.randn(300, 20, generator=g).to(dtype)
    b = torch.randn(40, 20, generator=g).to(dtype)
    A = scorch.to_sparse(a, "csr")
    torch.testing.assert_close(torch.addmm(b, A, X), torch.addmm(b, a, X))
    torch.testing.assert_close(torch.addmm(b, A, X, beta=2, alpha=0.3),
                               torch.addmm(b, a, X, beta=2, alpha=0.3))
    torch.testing.assert_close(torch.addmv(b[:, 0], A, X[:, 0]), torch.addmv(b[:, 0], a, X[:, 0]))
    torch.testing.assert_close(torch.baddbmm(b[None], A.unsqueeze(0), X[None]),
                               torch.baddbmm(b[None], a[None], X[None]))
    x, bias = torch.randn(7, 300, generator=g).to(dtype), torch.randn(40, generator=g).to(dtype)
    torch.testing.assert_close(F.linear(x, A, bias), F.linear(x, a, bias))
    B = scorch.to_sparse(b, "coo")
    torch.testing.assert_close(torch.add(scorch.to_sparse(b * 3, "csr"), B, alpha=0.7)
                               .to_dense(), torch.add(b * 3, b, alpha=0.7))
    # sampled_addmm (torch has no CPU half one): the float32 result rounded once
    U, V = torch.randn(40, 16, generator=g).to(dtype), torch.randn(16, 300, generator=g).to(dtype)
    got = torch.sparse.sampled_addmm(A, U, V, beta=0.5, alpha=2).to_dense()
    want = (2 * (U.float() @ V.float()) * (a != 0) + 0.5 * a.float()).to(dtype)
    torch.testing.assert_close(got, want)
    Ag = A.detach().requires_grad_()
    bg = b.clone().requires_grad_()
    torch.addmm(bg, Ag, X, beta=2).float().sum().backward()
    assert Ag.grad.dtype == dtype and bg.grad.dtype == dtype
    torch.testing.assert_close(bg.grad, torch.full_like(b, 2))


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
def test_conversions_between_dtypes(dtype):
    x32 = make_dense((5, 4), torch.float32, seed_of("half-to"), "random")
    A = scorch.to_sparse(x32, "csr")
    for B in (A.to(dtype), A.type_as(torch.zeros(1, dtype=dtype)),
              A.half() if dtype == torch.float16 else A.bfloat16()):
        assert isinstance(B, scorch.SparseTensor) and B.dtype == dtype
        exact(B, x32, dtype)
    H = A.to(dtype)
    assert H.type() == {torch.bfloat16: "torch.BFloat16Tensor",
                        torch.float16: "torch.HalfTensor"}[dtype]
    assert H.float().dtype == torch.float32 and H.double().dtype == torch.float64
    assert A.type(H.type()).dtype == dtype
    assert H.to_torch().dtype == dtype and H.to_torch(torch.sparse_coo).dtype == dtype
    with pytest.raises(TypeError, match="scipy.sparse has no"):
        H.to_scipy()


def test_promotion_mixes_dtypes():
    x32 = make_dense((5, 4), torch.float32, seed_of("half-mix"), "random")
    X = make_dense((4, 2), torch.float32, 1, "full")
    Ab = scorch.to_sparse(x32.to(torch.bfloat16), "csr")
    Ah = scorch.to_sparse(x32.to(torch.float16), "csr")
    assert (Ab @ X).dtype == torch.float32            # bf16 with f32 -> f32
    assert (Ab @ X.double()).dtype == torch.float64
    assert (Ab @ X.half()).dtype == torch.float32     # bf16 with f16 -> f32 (as torch)
    assert (Ab + Ah).dtype == torch.float32
    torch.testing.assert_close(Ab @ X, x32 @ X)


def test_sparse_linear_in_bfloat16():
    torch.manual_seed(0)
    layer = scorch.nn.SparseLinear(16, 8, density=0.3)
    x = torch.randn(4, 16)
    ref = layer(x)
    layer = layer.bfloat16()
    y = layer(x.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, ref.bfloat16(), rtol=2e-2, atol=2e-2)
    y.sum().backward()
    assert all(p.grad.dtype == torch.bfloat16 for p in layer.parameters())


@pytest.mark.parametrize("dtype", HALF, ids=_ids)
def test_enabled_route_takes_torch_half_sparse(dtype):
    x32 = make_dense((6, 5), torch.float32, seed_of("half-enable"), "random")
    X32 = make_dense((5, 3), torch.float32, 2, "full")
    with scorch.enabled():
        exact(torch.mm(x32.to(dtype).to_sparse_csr(), X32.to(dtype)), x32 @ X32, dtype)


def test_other_dtypes_are_refused_by_name():
    for dt in (torch.bool, torch.complex64):
        with pytest.raises(TypeError, match="bfloat16, float16, int64, .* or uint8"):
            scorch.to_sparse(torch.ones(2, 2, dtype=dt), "csr")
    A = scorch.to_sparse(torch.eye(2), "csr")
    with pytest.raises(TypeError, match="bfloat16, float16, int64, .* or uint8"):
        A.to(torch.bool)
    with pytest.raises(TypeError, match="scipy values, got float16"):
        scorch.to_sparse(sp.eye(2, dtype=np.float16, format="csr"), "csr")
