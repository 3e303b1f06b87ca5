"""SDDMM over operands whose rows are a compressed level (dcsr, dcsc, coo): the cost model
must iterate the sampled operand's entries (order i, j, k; j, i, k for the column-major
ones) with the dot product inside, as for csr.  It used to take a compressed level with
at least one entry a row for a dense loop, penalise that order as one that densifies its
sparse output, and choose order (k, i, j) with a workspace of every (i, j): 100-250x
slower on small graphs and out of memory on a 129k-row road network.  Checked: the
schedule chosen, the result against dense for each format and dtype (empty rows, one
entry a row, duplicates in coo), and a shape whose (i, j) workspace would not fit in
memory."""
import pytest
import torch

import scorch
from conftest import make_dense

# (the output has the operand's whole pattern, each value written at its entry's
# position, so the compressed outer level runs in parallel; coo's repeated rows too, each
# thread's share of the positions cut between runs)
FORMATS = {"dcsr": "order(i,j,k) parallel(i)", "coo": "order(i,j,k) parallel(i)",
           "dcsc": "order(j,i,k) parallel(j)"}


def schedule(A, U, V):
    text = scorch.explain("ij,ik,jk->ij", A, U, V)
    return next(l for l in text.splitlines() if l.startswith("schedule:")).split(": ", 1)[1]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["random", "empty_rows", "zeros", "full"])
def test_sampled_operand_outermost(fmt, dtype, kind):
    d = make_dense((23, 17), dtype=dtype, seed=3, kind=kind)
    g = torch.Generator().manual_seed(1)
    U = torch.rand(23, 16, generator=g, dtype=dtype)
    V = torch.rand(17, 16, generator=g, dtype=dtype)
    A = scorch.to_sparse(d, fmt)
    if A.nnz:
        assert schedule(A, U, V) == FORMATS[fmt]
        assert "workspace" not in schedule(A, U, V)
    S = scorch.einsum("ij,ik,jk->ij", A, U, V)
    torch.testing.assert_close(S.to_dense(), d * (U @ V.T))
    torch.testing.assert_close(torch.einsum("ij,ik,jk->ij", A, U, V).to_dense(), d * (U @ V.T))


def test_coo_duplicates_against_dense():
    i = torch.tensor([[0, 0, 0, 2, 2, 4], [1, 1, 3, 0, 0, 2]])
    v = torch.tensor([1.0, 2.0, 4.0, 8.0, -1.0, 3.0], dtype=torch.float64)
    coo = torch.sparse_coo_tensor(i, v, (5, 4))
    A = scorch.to_sparse(coo, "coo")
    U, V = torch.rand(5, 7, dtype=torch.float64), torch.rand(4, 7, dtype=torch.float64)
    S = scorch.einsum("ij,ik,jk->ij", A, U, V)
    torch.testing.assert_close(S.to_dense(), coo.to_dense() * (U @ V.T))


@pytest.mark.parametrize("fmt", ["dcsr", "coo"])
def test_no_workspace_of_every_pair(fmt):
    """200k x 200k with one entry a row: a workspace over (i, j) would need 40 G slots."""
    n = 200_000
    g = torch.Generator().manual_seed(2)
    cols = torch.randint(0, n, (n,), generator=g)
    idx = torch.stack([torch.arange(n), cols])
    vals = torch.rand(n, generator=g) + 0.5
    A = scorch.to_sparse(torch.sparse_coo_tensor(idx, vals, (n, n)), fmt)
    U, V = torch.rand(n, 16, generator=g), torch.rand(n, 16, generator=g)
    assert schedule(A, U, V) == FORMATS[fmt]
    S = scorch.einsum("ij,ik,jk->ij", A, U, V)
    ref = vals * (U * V[cols]).sum(1)
    torch.testing.assert_close(S.values(), ref)
