"""'...' in an einsum equation, as torch.einsum reads it: the dimensions an operand's
letters do not name, aligned at the right across operands; first in an implicit output,
summed where an explicit output has none.  Against torch.einsum on the dense tensors."""
import pytest
import torch

import scorch
from conftest import make_dense, seed_of


def dense_of(x):
    return x.to_dense() if isinstance(x, scorch.SparseTensor) else x


def check(expr, *ops, einsum=torch.einsum):
    got = einsum(expr, *ops)
    ref = torch.einsum(expr, *[dense_of(o) for o in ops])
    g = dense_of(got)
    assert g.dtype == ref.dtype and g.shape == ref.shape, (expr, g.shape, ref.shape)
    torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-4)
    return got


CASES = [
    # (expression, shapes of the operands; the first one sparse)
    ("...j,jk->...k", [(3, 4), (4, 5)]),
    ("...j,jk->...k", [(2, 3, 4), (4, 5)]),
    ("...j,jk", [(2, 3, 4), (4, 5)]),            # implicit output: the ellipsis first
    ("...j,jk->k", [(2, 3, 4), (4, 5)]),         # explicit output without it: summed
    ("...j,jk->k...", [(2, 3, 4), (4, 5)]),
    ("b...j,jk->...bk", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),  # widths 1 and 0: aligned at the right
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),   # a dense size-1 batch broadcast
    ("...ij,...j->...i", [(2, 3, 4), (4,)]),
    ("...", [(2, 3, 4)]),
    ("...->", [(2, 3)]),
    ("i...", [(3, 4, 2)]),
    ("...i->i", [(3, 4, 2)]),
    ("ij,jk->...", [(3, 4), (4, 5)]),              # an output ellipsis of no dimensions
    ("...ii->...i", [(2, 4, 4)]),                  # with a repeated index
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("fmt", ["csr-like", "coo"])
@pytest.mark.parametrize("expr,shapes", CASES)
def test_ellipsis_as_torch(expr, shapes, fmt, dtype):
    s = seed_of("ellipsis", expr, shapes, fmt, dtype)
    first = make_dense(shapes[0], dtype, s)
    if len(shapes[0]) >= 2 and shapes[0][-1] == shapes[0][-2]:
        first = first + torch.diag_embed(torch.ones(shapes[0][:-1], dtype=dtype))
    name = ("csr" if len(shapes[0]) == 2 else "csf" if len(shapes[0]) == 3 else "c") \
        if fmt == "csr-like" else "coo"
    ops = [scorch.to_sparse(first, name)]
    ops += [make_dense(sh, dtype, s + k, "full") for k, sh in enumerate(shapes[1:], 1)]
    for einsum in (torch.einsum, scorch.einsum):
        check(expr, *ops, einsum=einsum)


def test_sublist_form_with_ellipsis():
    A = scorch.to_sparse(make_dense((2, 3, 4), torch.float64, 1), "csf")
    X = make_dense((4, 5), torch.float64, 2, "full")
    got = torch.einsum(A, [..., 0], X, [0, 1], [..., 1])
    torch.testing.assert_close(got, torch.einsum(A.to_dense(), [..., 0], X, [0, 1], [..., 1]))


def test_gradients_through_ellipsis():
    x = make_dense((2, 3, 4), torch.float64, 3)
    A = scorch.to_sparse(x, "csf").requires_grad_()
    X = make_dense((4, 5), torch.float64, 4, "full").requires_grad_()
    xr, Xr = x.clone().requires_grad_(), X.detach().clone().requires_grad_()
    w = torch.arange(30.0, dtype=torch.float64).reshape(2, 3, 5)
    (torch.einsum("...j,jk->...k", A, X) * w).sum().backward()
    (torch.einsum("...j,jk->...k", xr, Xr) * w).sum().backward()
    torch.testing.assert_close(A.grad._vals, xr.grad[tuple(A.indices())])
    torch.testing.assert_close(X.grad, Xr.grad)


@pytest.mark.parametrize("expr,match", [
    ("..j,jk->k", "not part of one ellipsis"),
    ("....j,jk->k", "not part of one ellipsis"),
    ("...j...,jk->k", "not part of one ellipsis"),
    ("...j,jk->k.", "not part of one ellipsis"),
    ("...ijkl,jk->k", "operand 0 has 3 dimensions, fewer"),
])
def test_malformed_ellipsis(expr, match):
    A = scorch.to_sparse(make_dense((2, 3, 4), torch.float32, 5), "csf")
    with pytest.raises(ValueError, match=match):
        scorch.einsum(expr, A, torch.ones(4, 5))


@pytest.mark.parametrize("fmt", ["csf", "coo", "dense", scorch.Format("ccc", order=(2, 0, 1))])
def test_sparse_operand_is_broadcast(fmt):
    """A size-1 dimension of the sparse operand that another operand stretches is
    broadcast as torch's is (the kernel reads the tensor without that dimension), with
    gradients to both operands."""
    x = make_dense((1, 3, 4), torch.float64, 6)
    A = scorch.to_sparse(x, fmt).requires_grad_()
    X = make_dense((2, 4, 5), torch.float64, 7, "full").requires_grad_()
    xr, Xr = x.clone().requires_grad_(), X.detach().clone().requires_grad_()
    got = torch.einsum("...ij,...jk->...ik", A, X)
    ref = torch.einsum("...ij,...jk->...ik", xr, Xr)
    torch.testing.assert_close(got, ref)
    w = torch.arange(30.0, dtype=torch.float64).reshape(2, 3, 5)
    (got * w).sum().backward()
    (ref * w).sum().backward()
    torch.testing.assert_close(A.grad._vals, xr.grad[tuple(A.indices())])
    torch.testing.assert_close(X.grad, Xr.grad)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_column_and_row_broadcast(fmt):
    col = scorch.to_sparse(make_dense((5, 1), torch.float32, 8), fmt)
    row = scorch.to_sparse(make_dense((1, 4), torch.float32, 9), fmt)
    D = make_dense((5, 4), torch.float32, 10, "full")
    for expr, ops in [("ij,ij->ij", (col, D)), ("ij,ij->ij", (row, D)), ("ij,ij->i", (D, row)),
                      ("ij,ij", (col, row)), ("ij,jk->ik", (col, row.to_dense()))]:
        check(expr, *ops)


@pytest.mark.parametrize("fmt", ["csr", "dc", "dense", "csc", "coo", "dcsr", "cd", "c",
                                 "c(nonunique)"])
def test_one_element_sparse_operand_stretched_along_every_dimension(fmt):
    """A SparseTensor of one element that other operands stretch along all its
    dimensions is its value as a 0-D operand, as torch broadcasts it, with gradients as
    dense autograd's: the kernel had broadcast a dense level itself, and the gradient,
    sampled at the operand's one entry, missed the sum over the stretch ("ij,ij->" gave
    A.grad = X[0, 0], not X.sum()); other levels were refused.  Empty (nothing stored)
    and a coordinate stored twice too."""
    f64 = torch.float64
    X = make_dense((3, 4), f64, 13, "full")
    n = 1 if fmt in ("c", "c(nonunique)", "dense") else 2
    cases = [("i,i->", [X[:, 0]]), ("i,i->i", [X[0]]), ("i,ji->j", [X]), ("i,j->ij", [X[0]])] \
        if n == 1 else [("ij,ij->", [X]), ("ij,ij->ji", [X]), ("ij,ij->i", [X]),
                        ("ij,jk->ik", [X[:1]]), ("ab,ab,ab->b", [X, X.flip(0)])]
    if fmt == "c(nonunique)":
        sparse = [scorch.from_components((1,), fmt, pos=[torch.tensor([0, 2])],
                                         crd=[torch.tensor([0, 0])],
                                         values=torch.tensor([1.5, -4.0], dtype=f64))]
    else:
        sparse = [scorch.to_sparse(torch.full((1,) * n, v, dtype=f64), fmt) for v in (2.5, 0.0)]
    for S in sparse:
        coords = tuple(S.indices())
        for expr, others in cases:
            v = S.values().detach().clone().requires_grad_()
            xs = [o.detach().clone().requires_grad_() for o in others]
            got = torch.einsum(expr, S.with_values(v), *xs)
            vd = v.detach().clone().requires_grad_()
            xd = [o.detach().clone().requires_grad_() for o in others]
            dense = torch.zeros(S.shape, dtype=f64).index_put(coords, vd, accumulate=True)
            ref = torch.einsum(expr, dense, *xd)
            torch.testing.assert_close(dense_of(got), ref.detach(), msg=expr)
            w = torch.linspace(-1, 2, ref.numel(), dtype=f64).reshape(ref.shape)
            (dense_of(got) * w).sum().backward()
            (ref * w).sum().backward()
            torch.testing.assert_close(v.grad, vd.grad, msg=expr)
            for a, b in zip(xs, xd):
                torch.testing.assert_close(a.grad, b.grad, msg=expr)
    S = scorch.to_sparse(torch.full((1,) * n, 3, dtype=torch.int32), fmt)
    check("i,i->" if n == 1 else "ij,ij->", S, torch.arange(1, 13, dtype=torch.int32)
          .reshape((12,) if n == 1 else (3, 4)))


def test_broadcast_and_full_dense_operands_get_their_own_kernels():
    """A dense operand's size-1 dimension that is broadcast and the same dimension at full
    size compile to different kernels: calls alternating between them (each twice, the
    second on the remembered route) all match torch, in either order of first use."""
    for first in (1, 2):
        A = scorch.to_sparse(make_dense((2, 3, 4), torch.float64, 7 + first), "csf")
        for b in (first, 3 - first, first):
            X = make_dense((b, 4, 5), torch.float64, 20 + b, "full")
            for _ in range(2):
                check("zij,zjk->zik", A, X, einsum=scorch.einsum)
                check("...ij,...jk->...ik", A, X)


def test_errors_name_the_callers_equation():
    """An error of the compiler's about the equation it compiled from a rewritten one
    ('...' spelled out, a diagonal taken) names the caller's equation too."""
    A = scorch.to_sparse(make_dense((1, 3, 4), torch.float32, 6), "csf")
    with pytest.raises(ValueError, match=r"is illegal(.|\n)*compiled from the equation "
                                         r"'\.\.\.ij[^\n]*$"):
        scorch.einsum("...ij,...jk->...ik", A, torch.ones(2, 4, 5), schedule="parallel(j)")
    B = scorch.to_sparse(make_dense((3, 3, 4), torch.float32, 7), "csf")
    with pytest.raises(ValueError, match="reduction index(.|\n)*compiled from the equation 'iij->i'"):
        scorch.einsum("iij->i", B, schedule="parallel(j)")
    with pytest.raises(ValueError, match="index 'i' is repeated in A .* size 1 .* size 3"):
        scorch.einsum("iij->i", A)             # sizes differ: the call reaches the compiler
    with pytest.raises(ValueError, match="has 2 operands, 1 were given"):
        scorch.einsum("...ij,...jk->...ik", A)
    with pytest.raises(TypeError, match="operand 1 is a list"):
        scorch.einsum("...ij,jk", A, [[1.0]])


def test_explain_shows_the_equation_einsum_compiles():
    A = scorch.to_sparse(make_dense((2, 3, 4), torch.float32, 8), "csf")
    text = scorch.explain("...j,jk->...k", A, torch.ones(4, 5))
    assert text.startswith("expression: out(y,z,k) = A(y,z,j) * B(j,k)\n"), text[:80]
    B = scorch.to_sparse(make_dense((3, 3, 4), torch.float32, 9), "csf")
    text = scorch.explain("iij->j", B)
    assert text.startswith("expression: out(j) = A(i,j)\n"), text[:80]


@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_zero_dimensional_operands(fmt, dtype):
    """A 0-D operand (an empty term) is a scalar factor, as in torch.einsum, with its
    gradient."""
    A = scorch.to_sparse(make_dense((4, 5), dtype, 11), fmt)
    s, t = torch.tensor(3, dtype=dtype), torch.tensor(-2, dtype=dtype)
    x = make_dense((5,), dtype, 12, "full")
    for expr, ops in [("ij,->ij", (A, s)), (",ij->ji", (s, A)), ("ij,,j->i", (A, s, x)),
                      ("ij,,->", (A, s, t)), ("...j,->...", (A, s))]:
        check(expr, *ops)
    if dtype.is_floating_point:
        s = s.clone().requires_grad_()
        torch.einsum("ij,,j->i", A, s, x).sum().backward()
        torch.testing.assert_close(s.grad, (A.to_dense() @ x).sum())
