"""Operands whose dense levels sit under a compressed one (cd, ccd, dcd) compute forward
and backward: an output inferred from such an operand takes its level order with the
dense levels below the first sparse one made compressed (cd -> cc), the nearest format
an output can be assembled in, and the gradient of its values is sampled there and
placed on its own stored entries.  Checked against dense: sums, products with dense,
SDDMM, a transpose, and the gradients of a product and of a sum."""
import pytest
import torch

import scorch


def lines(text, start):
    return [l for l in text.splitlines() if l.startswith(start)]


def dense_rows(shape, dtype, seed):
    """Random values in rows (fibres of the last dimension) that are either all nonzero
    or all zero: what a dense last level stores."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 9, shape, generator=g).to(dtype)
    keep = torch.rand(*shape[:-1], 1, generator=g) < 0.5
    return x * keep


CASES = [("cd", (6, 4)), ("cd", (1, 1)), ("cd", (0, 3)), ("cd", (5, 0)),
         ("ccd", (3, 4, 5)), ("dcd", (3, 4, 5))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fmt,shape", CASES)
def test_forward(fmt, shape, dtype):
    x = dense_rows(shape, dtype, 1)
    A, B = scorch.to_sparse(x, fmt), scorch.to_sparse(2 * x, fmt)
    D = dense_rows(shape, dtype, 2) + 1
    torch.testing.assert_close((A + B).to_dense(), 3 * x)
    torch.testing.assert_close((A - B).to_dense(), -x)
    torch.testing.assert_close((A * D).to_dense(), x * D)
    ix = "ijk"[:len(shape)]
    torch.testing.assert_close(scorch.einsum(f"{ix}->{ix[::-1]}", A).to_dense(),
                               x.permute(*range(len(shape))[::-1]))
    assert torch.equal(A.to_dense(), x)                       # the operands untouched
    if len(shape) == 2:
        U = dense_rows((shape[0], 3), dtype, 3)
        V = dense_rows((shape[1], 3), dtype, 4)
        torch.testing.assert_close(torch.einsum("ij,ik,jk->ij", A, U, V).to_dense(),
                                   x * (U @ V.T))


def test_inferred_output_is_compressed_below_the_first_sparse_level():
    A = scorch.to_sparse(dense_rows((4, 3), torch.float64, 5), "cd")
    U, V = torch.ones(4, 2, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64)
    out = lines(scorch.explain("ij,ik,jk->ij", A, U, V), "output")
    assert out == ["output out: dcsr = cc (0,1) (inferred), int32 indices"]
    out = lines(scorch.explain("ij->ji", A), "output")
    assert out == ["output out: dcsc = cc (1,0) (inferred), int32 indices"]
    with pytest.raises(NotImplementedError, match=r"level 1 \(dense\) cannot be assembled"):
        scorch.einsum("ij,ij->ij", A, A, out_format="cd")     # asked for: still refused


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fmt,shape", CASES)
def test_gradients(fmt, shape, dtype):
    x = dense_rows(shape, dtype, 6)
    stored = scorch.to_sparse(x, fmt)
    rows = (x != 0).any(-1, keepdim=True).expand_as(x)          # the entries it stores
    A = stored.clone().requires_grad_()
    B = scorch.to_sparse(2 * x, fmt).requires_grad_()
    (A + B).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), rows.to(dtype))
    torch.testing.assert_close(B.grad.to_dense(), rows.to(dtype))
    if len(shape) == 2:
        X = dense_rows((shape[1], 3), dtype, 7)
        A = stored.clone().requires_grad_()
        xd = x.clone().requires_grad_()
        ((A @ X) ** 2).sum().backward()
        ((xd @ X) ** 2).sum().backward()
        torch.testing.assert_close(A.grad.to_dense(), xd.grad * rows)
