"""Second derivatives through scorch's kernels: the gradients are einsums over the same
operands, recorded under create_graph=True, so torch.autograd.gradgradcheck passes
(float64) for every routed product in every format, with duplicates and empty rows, and
a gradient penalty, a Hessian and a Hessian-vector product equal the dense ones."""
import pytest
import torch
import torch.nn.functional as F

import scorch
from conftest import coo_pair_with_duplicates, make_dense, seed_of

FMTS = ["csr", "csc", "coo", "dcsr"]
f64 = torch.float64


def rnd(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=f64).requires_grad_()


def dense_of(x):
    return x.to_dense() if isinstance(x, scorch.SparseTensor) else x


def pattern(shape, fmt, tag, kind="empty_rows"):
    return scorch.to_sparse(make_dense(shape, f64, seed_of("ggc", fmt, tag), kind), fmt)


def vals(A, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(A.nnz, generator=g, dtype=f64).requires_grad_()


def gradgradcheck(fn, *inputs):
    assert torch.autograd.gradgradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


# Each product of one sparse operand (its values v) and dense ones, as the user writes it.
PRODUCTS = {
    "matmul": (lambda A, X, Y: A @ X, (5, 3), (4, 3)),
    "mv": (lambda A, x, y: torch.mv(A, x), (5,), (2,)),
    "left": (lambda A, X, Y: Y @ A, (5, 3), (2, 4)),
    "linear_input": (lambda A, W, b: F.linear(A, W, b), (3, 5), (3,)),
    "linear_weight": (lambda A, x, b: F.linear(x, A, b), (2, 5), (4,)),
    "addmm": (lambda A, X, Y: torch.addmm(Y, A, X, beta=0.5, alpha=2.0), (5, 3), (4, 3)),
    "sparse_mm_mean": (lambda A, X, Y: torch.sparse.mm(A, X, reduce="mean"), (5, 3), (1,)),
    "sddmm": (lambda A, Q, K: torch.einsum("ij,ik,jk->ij", A, Q, K), (4, 3), (5, 3)),
    "sampled_addmm": (lambda A, Q, K: torch.sparse.sampled_addmm(A, Q, K.t()), (4, 3), (5, 3)),
    "times_dense": (lambda A, D, E: A * D, (4, 5), (1,)),
    "plus_dense": (lambda A, D, E: A + D * E, (4, 5), (4, 5)),
    "transposed": (lambda A, X, Y: A.t() @ X, (4, 2), (1,)),
    "twice": (lambda A, X, Y: A @ (A.t() @ X), (4, 2), (1,)),
    "squared": (lambda A, X, Y: (A * A) @ X, (5, 2), (1,)),
}


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_gradgradcheck_products(name, fmt):
    fn, s1, s2 = PRODUCTS[name]
    if name == "sparse_mm_mean" and fmt != "csr":
        pytest.skip("torch.sparse.mm's reduce= takes CSR only")
    A = pattern((4, 5), fmt, name)
    gradgradcheck(lambda v, X, Y: dense_of(fn(A.with_values(v), X, Y)),
                  vals(A, 1), rnd(s1, 2), rnd(s2, 3))


@pytest.mark.parametrize("fa,fb", [("csr", "csr"), ("csr", "csc"), ("coo", "dcsr")])
def test_gradgradcheck_spgemm_and_sum(fa, fb):
    A = pattern((4, 5), fa, "a")
    B = pattern((5, 3), fb, "b", "random")
    gradgradcheck(lambda va, vb: dense_of(A.with_values(va) @ B.with_values(vb)),
                  vals(A, 1), vals(B, 2))
    C = pattern((4, 5), fb, "c", "random")
    gradgradcheck(lambda va, vc: dense_of(A.with_values(va) - C.with_values(vc) * 2),
                  vals(A, 3), vals(C, 4))


def test_gradgradcheck_with_duplicates():
    _, A = coo_pair_with_duplicates(make_dense((4, 5), f64, seed_of("ggc-dups")),
                                    seed_of("ggc-dups", 1), f64)
    assert A.nnz > torch.count_nonzero(A.to_dense())
    gradgradcheck(lambda v, X: A.with_values(v) @ X, vals(A, 1), rnd((5, 2), 2))
    gradgradcheck(lambda v, Q, K: torch.einsum("ij,ik,jk->ij", A.with_values(v), Q, K)
                  .to_dense(), vals(A, 3), rnd((4, 2), 4), rnd((5, 2), 5))


@pytest.mark.parametrize("fmt", FMTS)
def test_gradient_penalty_matches_dense(fmt):
    """A gradient penalty through a fixed sparse mask (no sparse value requires grad):
    the penalty's gradient reaches K, as the dense computation's does."""
    m = make_dense((4, 5), f64, seed_of("penalty", fmt), "empty_rows")
    grads = []
    for mask in (scorch.to_sparse(m, fmt), m):
        Q, K = rnd((4, 3), 1), rnd((5, 3), 2)
        S = torch.sparse.sampled_addmm(mask, Q, K.t(), beta=0) if mask is not m else \
            (m != 0) * (Q @ K.t())
        gQ, = torch.autograd.grad(dense_of(S).pow(2).sum(), Q, create_graph=True)
        assert gQ.requires_grad
        (gQ.pow(2).sum() + K.pow(2).sum()).backward()
        grads.append((Q.grad, K.grad))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_hessian_and_hvp_match_dense(fmt):
    from torch.autograd.functional import hessian, hvp
    a = make_dense((3, 4), f64, seed_of("hessian", fmt))
    A = scorch.to_sparse(a, fmt)
    X, V = rnd((4, 2), 1).detach(), rnd((4, 2), 2).detach()
    got = hessian(lambda X: (A @ X).pow(3).sum(), X)
    want = hessian(lambda X: (a @ X).pow(3).sum(), X)
    assert want.abs().sum() > 0
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(hvp(lambda X: (A @ X).pow(3).sum(), X, V)[1],
                               hvp(lambda X: (a @ X).pow(3).sum(), X, V)[1])


def test_second_derivative_wrt_sparse_values():
    """d/dv of a gradient w.r.t. X that depends on v: the penalty's gradient reaches the
    sparse values (a SparseLinear's weight under a gradient penalty on its input)."""
    dense = torch.nn.Linear(4, 3, dtype=f64)
    lin = scorch.nn.SparseLinear.from_dense(dense, density=0.5)
    with torch.no_grad():
        dense.weight.copy_(lin.weight.to_dense())
    out = []
    for layer in (lin, dense):
        x = rnd((2, 4), 5)
        g, = torch.autograd.grad(layer(x).tanh().sum(), x, create_graph=True)
        g.pow(2).sum().backward()
        w = layer.values.grad if layer is lin else layer.weight.grad[lin.weight.to_dense() != 0]
        out.append((w, x.grad))
    for got, want in zip(*out):
        torch.testing.assert_close(got, want)
