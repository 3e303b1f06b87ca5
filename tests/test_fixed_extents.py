"""Kernels written for the size of a dense-only index (lower/problem.c: an index that only
dense operands read, of extent 1..64, such as SDDMM's and SpMM's K): the extent is a
constant in the generated C, the kernel refuses other sizes, and scorch compiles the
kernel for each size it meets, up to 4 per signature, then one generic kernel for the
rest, on every route (einsum, scorch.kernel, autograd, a kernel remembered on the
operand, an operand transposed before the run)."""
import pytest
import torch

import scorch
from scorch import _C, _compiler

SDDMM = "ij,ik,jk->ij"
KS = [16, 32, 16, 100, 1, 64, 65, 16]


def _sparse(rows, cols, fmt="csr", seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    d = torch.rand(rows, cols, generator=g, dtype=dtype) * (torch.rand(rows, cols, generator=g) < 0.3)
    return scorch.to_sparse(d, fmt), d


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sddmm_alternating_sizes(fmt, dtype):
    A, d = _sparse(37, 29, fmt, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    for K in KS:
        U = torch.rand(37, K, generator=g, dtype=dtype)
        V = torch.rand(29, K, generator=g, dtype=dtype)
        y = scorch.einsum(SDDMM, A, U, V)
        torch.testing.assert_close(y.to_dense(), d * (U @ V.T))
        text = scorch.explain(SDDMM, A, U, V)
        # written for this K (the first sizes met) or for any; never for another
        assert ("written for" not in text) or (f"written for k = {K} " in text), text[:600]
        if K in (16, 32):
            assert f"written for k = {K} " in text and "const int64_t Nk_" in text


def test_a_kernel_refuses_other_sizes():
    A, _ = _sparse(20, 10)
    U, V = torch.rand(20, 16), torch.rand(10, 16)
    scorch.einsum(SDDMM, A, U, V)
    entry = A._kernels[SDDMM][1]
    assert entry[5] == ((1, 1, 16), (2, 1, 16))
    with pytest.raises(ValueError, match="index k has size 8; the kernel was written for size 16"):
        _C.run(entry[0], [A._desc[0], torch.rand(20, 8), torch.rand(10, 8)], 1)


def test_index_notation_and_a_vector_factor():
    """scorch.kernel with alternating K, and a summed index read by a matrix and a vector
    (ij,jk,k->i: k fixed, j is A's)."""
    A, d = _sparse(23, 17)
    k = scorch.kernel("out(i,j) = A(i,j) * B(i,k) * C(j,k)", A="csr")
    for K in (8, 9, 8):
        B, C = torch.rand(23, K), torch.rand(17, K)
        torch.testing.assert_close(k(A, B, C).to_dense(), d * (B @ C.T))
        M, c = torch.rand(17, K), torch.rand(K)
        torch.testing.assert_close(scorch.einsum("ij,jk,k->i", A, M, c), d @ (M @ c))


def test_which_indices_are_fixed():
    """SpMM's K (an output index only X reads) is fixed where the loop over the output's
    rows is outermost; not in a scatter (A.t() @ H in order j,i,k, the stored columns
    outermost), not SpMV's j nor the rows (A's), nor an extent above 64."""
    A, d = _sparse(30, 20)
    assert "written for k = 16 " in scorch.explain("ij,jk->ik", A, torch.rand(20, 16))
    H = torch.rand(30, 16)
    # (the automatic schedule reads A.t() through a csr copy, rows outermost: fixed)
    assert "written for k = 16 " in scorch.explain(torch.mm, A.t(), H)
    assert "written for" not in scorch.explain("ij,jk->ik", A.t(), H, schedule="order(j,i,k)")
    torch.testing.assert_close(A.t() @ H, d.t() @ H)
    assert "written for" not in scorch.explain("ij,jk->ik", A, torch.rand(20, 65))
    assert "written for" not in scorch.explain("ij,j->i", A, torch.rand(20))


def test_sizes_per_signature_then_generic(monkeypatch):
    """A signature gets kernels written for its first 4 sizes; later sizes share one
    generic kernel (a batch size that keeps changing compiles 5 kernels, not one each)."""
    monkeypatch.setattr(_compiler, "_KERNELS", {})   # a fresh cache: no size met before
    monkeypatch.setattr(_compiler, "_SIZES", {})
    A, d = _sparse(41, 19, seed=7)
    seen = []
    for K in (2, 3, 4, 5, 6, 7, 2, 7):
        X = torch.rand(19, K)
        torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), d @ X)
        text = scorch.explain("ij,jk->ik", A, X)
        seen.append("written for k = " in text)
    assert seen == [True, True, True, True, False, False, True, False]


def test_autograd_through_alternating_widths():
    """dA of A @ X is an SDDMM over X's columns: alternate them."""
    A, d = _sparse(25, 15)
    rows, cols = d.nonzero(as_tuple=True)   # CSR's entry order
    g = torch.Generator().manual_seed(2)
    for K in (16, 24, 16):
        X, W = torch.rand(15, K, generator=g), torch.rand(25, K, generator=g)
        v = A.values().clone().requires_grad_(True)
        ((A.with_values(v) @ X) * W).sum().backward()
        torch.testing.assert_close(v.grad, (W @ X.T)[rows, cols])


def test_a_sized_kernel_written_for_more_extents_than_its_key_names():
    """An all-dense operand's own extents are fixed when K = 0 and not for K = 2, so the
    kernel filed under "K = 0" was written for one matrix shape too: a matrix of another
    shape in the same size class, with K = 0, gets the generic kernel (it was refused:
    "index i has size 5; the kernel was written for size 4")."""
    def run(m, n, k):
        x = torch.arange(1.0, m * n + 1).reshape(m, n)
        A = scorch.to_sparse(x, "dense")
        r = scorch.einsum(SDDMM, A, torch.ones(m, k), torch.ones(n, k))
        assert torch.equal(r.to_dense() if isinstance(r, scorch.SparseTensor) else r,
                           x * k)
    for m, n, k in [(4, 5, 2), (4, 5, 0), (5, 4, 0), (5, 4, 2), (4, 5, 0)]:
        run(m, n, k)
