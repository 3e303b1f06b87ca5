"""A repeated index in an einsum term ("ii->i", "ii->", "iji,j->i") reads the operand's
diagonal, as torch.einsum does: for a SparseTensor in every format and value dtype, and
for a dense operand beside a sparse one, with gradients; torch.trace of a SparseTensor."""
import pytest
import torch

import scorch
from conftest import coo_pair_with_duplicates, make_dense, seed_of

FORMATS_2D = ["csr", "csc", "coo", "dcsr", "dcsc", "dense", "cd",
              scorch.Format("cc", order=(1, 0))]
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


def with_diagonal(shape, dtype, seed, kind="random"):
    """make_dense's tensor with every other place of its main diagonal set (so the
    diagonal has stored entries and unstored zeros both)."""
    x = make_dense(shape, dtype, seed, kind)
    if kind == "random":
        n = min(shape)
        idx = torch.arange(0, n, 2)
        x[(idx,) * len(shape)] = torch.arange(1, idx.numel() + 1).to(dtype)
    return x


def dense_of(x):
    return x.to_dense() if isinstance(x, scorch.SparseTensor) else x


def check(expr, *ops, einsum=torch.einsum):
    snaps = [dense_of(o).clone() for o in ops]
    got = einsum(expr, *ops)
    ref = torch.einsum(expr, *[dense_of(o) for o in ops])
    g = dense_of(got)
    assert g.dtype == ref.dtype and g.shape == ref.shape, (g.dtype, ref.dtype, g.shape)
    torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-4)
    for o, s in zip(ops, snaps):
        assert torch.equal(dense_of(o), s), "an operand was modified"
    return got


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("expr", ["ii->i", "ii->", "ii", "ii,i->i", "ij,ii->j"])
def test_matrix_diagonal(expr, fmt, dtype):
    s = seed_of("diag", expr, str(fmt), dtype)
    A = scorch.to_sparse(with_diagonal((7, 7), dtype, s), fmt)
    ops = [A]
    if "," in expr:
        x = make_dense((7, 7) if expr.startswith("ij") else (7,), dtype, s + 1, "full")
        ops = [x, A] if expr.startswith("ij") else [A, x]
    for einsum in (torch.einsum, scorch.einsum):
        check(expr, *ops, einsum=einsum)


def test_diagonal_of_compressed_matrix_is_sparse_vector():
    """A csr matrix's diagonal keeps only the stored diagonal entries: a sparse vector."""
    x = torch.tensor([[2.0, 0, 1], [0, 0, 0], [3, 0, 5]])
    d = torch.einsum("ii->i", scorch.to_sparse(x, "csr"))
    assert isinstance(d, scorch.SparseTensor) and d.nnz == 2
    assert torch.equal(d.to_dense(), torch.tensor([2.0, 0, 5]))


@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (5, 5)])
@pytest.mark.parametrize("kind", ["zeros", "random", "full"])
@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_edge_inputs(fmt, kind, shape):
    x = with_diagonal(shape, torch.float32, seed_of("edge", shape, kind), kind)
    A = scorch.to_sparse(x, fmt)
    for expr in ("ii->i", "ii->"):
        check(expr, A)
    torch.testing.assert_close(torch.trace(A), torch.trace(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_duplicate_coordinates_are_summed(dtype):
    ref = with_diagonal((6, 6), torch.float64, 5)
    _, A = coo_pair_with_duplicates(ref, 11, dtype)
    assert A.nnz > torch.count_nonzero(ref)
    for expr in ("ii->i", "ii->", "ii,ij->j"):
        ops = (A,) if "," not in expr else (A, make_dense((6, 6), dtype, 3, "full"))
        check(expr, *ops)
    torch.testing.assert_close(torch.trace(A), torch.trace(ref.to(dtype)))


@pytest.mark.parametrize("fmt", ["csf", "coo", "dense", "ddc", scorch.Format("ccc", order=(2, 0, 1))])
@pytest.mark.parametrize("expr", ["iji->ij", "iij->j", "jii->ij", "iii->i", "iii->", "iij,j->i",
                                  "iji,jk->ik"])
def test_higher_order(expr, fmt):
    s = seed_of("3d", expr, str(fmt))
    A = scorch.to_sparse(with_diagonal((5, 5, 5), torch.float64, s), fmt)
    ops = [A]
    for t in expr.split("->")[0].split(",")[1:]:
        ops.append(make_dense((5,) * len(t), torch.float64, s + len(ops), "full"))
    check(expr, *ops)


def test_two_repeated_pairs():
    x = with_diagonal((4, 3, 4, 3), torch.float64, 9)
    x[1, 2, 1, 2] = 7.0
    check("ijij->ij", scorch.to_sparse(x, "csf"))
    check("ijij->", scorch.to_sparse(x, "coo"))


def test_rectangular_repeat_is_refused_with_sizes():
    A = scorch.to_sparse(make_dense((3, 4), torch.float32, 1), "csr")
    with pytest.raises(ValueError, match="repeated in A .* size 3 .* size 4"):
        scorch.einsum("ii->i", A)


@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsc"])
@pytest.mark.parametrize("expr", ["ii->i", "ii->", "ii,ij->j", "ij,jj->ij"])
def test_gradients(expr, fmt):
    """Gradients w.r.t. a sparse operand's values and a dense operand through a repeated
    index, against torch.autograd on the dense tensors (the sparse gradient at the
    stored entries)."""
    s = seed_of("grad", expr, fmt)
    x = with_diagonal((6, 6), torch.float64, s)
    A = scorch.to_sparse(x, fmt).requires_grad_()
    D = make_dense((6, 6), torch.float64, s + 1, "full").requires_grad_()
    xr = x.clone().requires_grad_()
    Dr = D.detach().clone().requires_grad_()
    ops, refs = ([A], [xr]) if "," not in expr else ([A, D], [xr, Dr])
    got = torch.einsum(expr, *ops)
    ref = torch.einsum(expr, *refs)
    w = torch.arange(1.0, ref.numel() + 1, dtype=torch.float64).reshape(ref.shape)
    (dense_of(got) * w).sum().backward()
    (ref * w).sum().backward()
    stored = A.indices()
    torch.testing.assert_close(A.grad._vals, xr.grad[tuple(stored)])
    if "," in expr:
        torch.testing.assert_close(D.grad, Dr.grad)


def test_trace():
    for fmt in FORMATS_2D:
        for shape in [(4, 4), (3, 5), (5, 3)]:
            for dtype in DTYPES:
                x = with_diagonal(shape, dtype, seed_of("trace", str(fmt), shape, dtype))
                A = scorch.to_sparse(x, fmt)
                t = torch.trace(A)
                assert t.dtype == torch.trace(x).dtype
                assert torch.equal(t, torch.trace(x)) and torch.equal(A.trace(), t)
    with pytest.raises(RuntimeError, match="expected a matrix"):
        torch.trace(scorch.to_sparse(torch.ones(3), "c"))


def test_trace_gradient():
    x = with_diagonal((4, 5), torch.float32, 2)
    A = scorch.to_sparse(x, "csr").requires_grad_()
    torch.trace(A).backward()
    r, c = A.indices()
    assert torch.equal(A.grad._vals, (r == c).to(torch.float32))
