"""The automatic schedule credits a parallel loop over a sparse operand's rows and charges a
copy the Python layer keeps as one pass: Aᵀ·G over a csr A (the gradient of A·X) reads a
csc copy with the output's rows in parallel instead of scattering on one thread, and a csc
A·X reads a csr copy.  Checked: the schedules, results against dense over dtypes, index
widths and edge shapes, the copy kept on the tensor, the gradient of A·X through
autograd, and orders the credit must not move (SpGEMM's Gustavson order over coo and
dcsr, a plain csr SpMM)."""
import pytest
import torch

import scorch
from conftest import make_dense


def lines(text, start):
    return [l for l in text.splitlines() if l.startswith(start)]


def schedule(expr, *ops):
    return lines(scorch.explain(expr, *ops), "schedule:")[0].split(": ", 1)[1]


SHAPES = [(40, 30), (1, 1), (0, 4), (5, 0), (64, 3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
@pytest.mark.parametrize("shape", SHAPES)
def test_transposed_product_reads_a_csc_copy_in_parallel(dtype, it, shape):
    d = make_dense(shape, dtype=dtype, seed=sum(shape) + 1,
                   kind="empty_rows" if 0 not in shape else "random")
    A = scorch.to_sparse(d, "csr", index_dtype=it)
    G = torch.rand(shape[0], 20, dtype=dtype, generator=torch.Generator().manual_seed(3))
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    if A.nnz:
        text = scorch.explain("ik,ij->jk", G, A)
        assert lines(text, "  transposed before running to csc")
        assert schedule("ik,ij->jk", G, A) == "order(j,i,k) parallel(j)"
    torch.testing.assert_close(scorch.einsum("ik,ij->jk", G, A), d.t() @ G, **tol)
    torch.testing.assert_close(scorch.einsum("ij,ik->jk", A, G), d.t() @ G, **tol)
    if A.nnz:
        assert [f.name for f in A._transposed] == ["csc"]          # one copy, kept
        assert A.format.name == "csr" and torch.equal(A.to_dense(), d)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_csc_product_reads_a_csr_copy_in_parallel(dtype, shape):
    d = make_dense(shape, dtype=dtype, seed=sum(shape) + 2,
                   kind="empty_rows" if 0 not in shape else "random")
    A = scorch.to_sparse(d, "csc")
    g = torch.Generator().manual_seed(4)
    X = torch.rand(shape[1], 24, dtype=dtype, generator=g)
    x = torch.rand(shape[1], dtype=dtype, generator=g)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    if A.nnz:
        assert schedule("ij,jk->ik", A, X) == "order(i,j,k) parallel(i)"
    if shape == (40, 30):   # (64 rows over 3 columns: the 3-column loop outermost is cheaper)
        assert schedule("ij,j->i", A, x) == "order(i,j) parallel(i)"
    torch.testing.assert_close(A @ X, d @ X, **tol)
    torch.testing.assert_close(torch.mv(A, x), d @ x, **tol)


def test_gradient_of_a_product_through_autograd():
    d = make_dense((50, 35), dtype=torch.float64, seed=21, kind="empty_rows")
    A = scorch.to_sparse(d, "csr")
    X = torch.rand(35, 8, dtype=torch.float64, requires_grad=True)
    Xd = X.detach().clone().requires_grad_(True)
    W = torch.rand(50, 8, dtype=torch.float64)
    ((A @ X) * W).sum().backward()
    ((d @ Xd) * W).sum().backward()
    torch.testing.assert_close(X.grad, Xd.grad)
    assert [f.name for f in A._transposed] == ["csc"]              # the backward read it
    A.values().mul_(-1)                                             # stale copy: remade
    X.grad = None
    ((A @ X) * W).sum().backward()
    torch.testing.assert_close(X.grad, -Xd.grad)


@pytest.mark.parametrize("fmt", ["coo", "dcsr", "csr"])
def test_spgemm_keeps_the_row_order(fmt):
    """A two-level outer-product workspace must not win because a copy became cheap."""
    g = torch.Generator().manual_seed(9)
    a = (torch.rand(300, 200, generator=g) < 0.01) * torch.rand(300, 200, generator=g)
    b = (torch.rand(200, 64, generator=g) < 0.05) * torch.rand(200, 64, generator=g)
    A, B = scorch.to_sparse(a, fmt), scorch.to_sparse(b, "csr")
    s = schedule("ij,jk->ik", A, B)
    assert s.startswith("order(i,j,k)") and s.endswith("workspace(k)"), s
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, B).to_dense(), a @ b)


def test_csr_spmm_unchanged():
    d = make_dense((30, 20), dtype=torch.float32, seed=5, kind="random")
    A = scorch.to_sparse(d, "csr")
    X = torch.rand(20, 16)
    assert schedule("ij,jk->ik", A, X) == "order(i,j,k) parallel(i)"
    assert lines(scorch.explain("ij,jk->ik", A, X), "  transposed") == []
    torch.testing.assert_close(A @ X, d @ X)
    assert A._transposed is None


def test_a_new_tensor_on_a_converted_pattern_gathers_its_copy():
    """with_values (dropout on the values, every training step) makes a new tensor on the
    same pattern: its transposed copy reuses the pattern's converted arrays and gathers
    the new values, with results equal to dense; the record leaves with the pattern."""
    import gc

    from scorch import _compiler
    d = make_dense((30, 25), dtype=torch.float64, seed=31, kind="empty_rows")
    A = scorch.to_sparse(d, "csr")
    G = torch.rand(30, 6, dtype=torch.float64)
    torch.testing.assert_close(scorch.einsum("ik,ij->jk", G, A), d.t() @ G)
    first = next(iter(A._transposed.values()))[1]
    for scale in (2.0, -0.5):
        B = A.with_values(A.values() * scale)
        torch.testing.assert_close(scorch.einsum("ik,ij->jk", G, B), scale * d.t() @ G)
        second = next(iter(B._transposed.values()))[1]
        shared = [(a.data_ptr(), b.data_ptr()) for a, b in zip(first._pos + first._crd,
                                                              second._pos + second._crd)
                  if a is not None]
        assert shared and all(p == q for p, q in shared)          # the pattern's arrays
        assert torch.equal(second.to_dense(), scale * d)
    key = id(A._crd[-1])
    assert key in _compiler._PATTERNS
    del A, B, first, second
    gc.collect()
    assert key not in _compiler._PATTERNS


def test_dropout_features_gradient_through_the_gathered_copy():
    """X W with X's values dropped out each step: the weight's gradient (X^T G) over the
    gathered copies equals dense, step after step."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(40, 30, generator=g, dtype=torch.float64)
    x = x * (torch.rand(40, 30, generator=g) < 0.2)
    X = scorch.to_sparse(x, "csr")
    W = torch.randn(30, 5, generator=g, dtype=torch.float64, requires_grad=True)
    for step in range(3):
        keep = (torch.rand(X.nnz, generator=g) < 0.5).to(torch.float64) * 2
        Xs = X.with_values(X.values() * keep)
        W.grad = None
        (Xs @ W).square().sum().backward()
        xs = Xs.to_dense()
        Wd = W.detach().clone().requires_grad_()
        (xs @ Wd).square().sum().backward()
        torch.testing.assert_close(W.grad, Wd.grad)


def test_duplicates_are_summed_not_gathered():
    """A COO with repeated coordinates converts to DCSR with fewer entries: no gather
    record, the conversion itself every time, results equal to dense."""
    i = torch.tensor([[0, 0, 2, 2, 3], [1, 1, 0, 4, 4]])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    pos = torch.tensor([0, 5], dtype=torch.int32)
    A = scorch.from_components((4, 5), "coo", pos=[pos, None],
                               crd=[i[0].to(torch.int32), i[1].to(torch.int32)], values=v)
    dense = torch.sparse_coo_tensor(i, v, (4, 5)).to_dense()
    x = torch.rand(5, dtype=torch.float64)
    for scale in (1.0, 3.0):
        B = A.with_values(v * scale)
        torch.testing.assert_close(scorch.einsum("ij,j->i", B, x), scale * dense @ x)


def test_patterns_sharing_an_array_are_told_apart():
    """Two tensors on the same column array object with different row pointers are two
    patterns: each gets its own copy (the record is keyed on that array, and checked
    against every array of the pattern)."""
    cols = torch.tensor([0, 2, 1, 3], dtype=torch.int32)
    vals = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    P = torch.tensor([0, 2, 4, 4], dtype=torch.int32)
    Q = torch.tensor([0, 1, 2, 4], dtype=torch.int32)
    A = scorch.from_components((3, 4), "csr", pos=[None, P], crd=[None, cols], values=vals)
    B = scorch.SparseTensor(A.shape, A._format, [None, Q], A._crd, vals,   # A's crd object
                            index_dtype=torch.int32, checked=True)   # (scorch's own form)
    assert B._crd[1] is A._crd[1]
    G = torch.rand(3, 5, dtype=torch.float64)
    for _ in range(2):
        for X in (A, B, A.with_values(vals * 2), B.with_values(vals * 2)):
            torch.testing.assert_close(scorch.einsum("ik,ij->jk", G, X), X.to_dense().t() @ G)


@pytest.mark.parametrize("fmt", ["coo", "csr", "csc", "dcsr"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_transposed_view_gets_its_own_copy(fmt, dtype):
    """A.t() shares A's index arrays under the other level order and shape: a copy made
    for A (A @ v reads a DCSR copy of a COO A) must not serve A.t() @ Y, nor the reverse;
    each product equals dense, in both call orders, on square and rectangular shapes."""
    for shape in ((17, 9), (9, 17), (12, 12), (1, 1)):
        d = make_dense(shape, dtype=dtype, seed=7, kind="random")
        x = torch.rand(shape[1], dtype=dtype)
        Y = torch.rand(shape[0], 5, dtype=dtype)
        for first in ("plain", "transposed"):
            A = scorch.to_sparse(d, fmt)
            runs = [lambda: (A @ x, d @ x), lambda: (A.t() @ Y, d.t() @ Y),
                    lambda: (scorch.einsum("ik,ij->jk", Y, A), d.t() @ Y)]
            for run in (runs if first == "plain" else runs[::-1]) * 2:
                got, want = run()
                torch.testing.assert_close(got, want)
