"""A batch of sparse matrices as one third-order tensor whose batch and row levels are
dense (ddc): SpMV "bij,bj->bi" and SpMM "bij,bjk->bik" (torch.bmm) read it as stored,
in parallel over the batch, however few its matrices.

Two faults are checked here.  First, the cost model judged a transposed order's
innermost loop by the levels the operand is stored in, so a ddc batch chose order b,j,i
over a ddc (0,2,1) copy and that copy chose b,i,j: the operand was transposed on every
run, 50x the work.  Second, a parallel loop over a dense index ran on one thread below
128 iterations and gave each thread chunks of 64, so a batch of 2-100 ran on one thread.
Results against dense for f32/f64 and int32/int64 indices, batches of 1-5, empty and
all-zero matrices, on one thread and on two."""
import pytest
import torch

import scorch
from conftest import make_dense, seed_of, with_threads


def batch_of(shape, dtype, it, seed, kind="random", fmt="ddc"):
    d = make_dense(shape, dtype=dtype, seed=seed, kind=kind, density=0.2)
    return scorch.to_sparse(d, fmt, index_dtype=it), d


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
@pytest.mark.parametrize("shape", [(1, 7, 5), (2, 5000, 3), (3, 2900, 41), (5, 1, 1),
                                   (2, 0, 4), (4, 6, 0), (3, 64, 64)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmt", ["ddc", "csf", "coo"])
def test_batched_spmv_spmm_against_dense(dtype, it, shape, threads, fmt):
    A, d = batch_of(shape, dtype, it, seed=sum(shape) + 7 * (dtype == torch.float64), fmt=fmt)
    g = torch.Generator().manual_seed(3)
    b, n, m = shape
    x = torch.rand(b, m, generator=g, dtype=dtype)
    X = torch.rand(b, m, 19, generator=g, dtype=dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    y = with_threads(threads, lambda: scorch.einsum("bij,bj->bi", A, x))
    torch.testing.assert_close(y, torch.einsum("bij,bj->bi", d, x), **tol)
    Y = with_threads(threads, lambda: torch.bmm(A, X))
    torch.testing.assert_close(Y, torch.bmm(d, X), **tol)


def test_all_zero_batch():
    A, d = batch_of((3, 40, 30), torch.float32, torch.int32, seed=1, kind="zeros")
    x = torch.rand(3, 30)
    assert A.nnz == 0
    torch.testing.assert_close(scorch.einsum("bij,bj->bi", A, x), torch.zeros(3, 40))


def schedule_and_copies(expr, A, *dense):
    text = scorch.explain(expr, A, *dense)
    sched = next(l for l in text.splitlines() if l.startswith("schedule:"))
    return sched, "before running" in text, text


@pytest.mark.parametrize("expr, other", [("bij,bj->bi", (4, 300)),
                                         ("bij,bjk->bik", (4, 300, 16))])
def test_batch_read_as_stored_in_parallel(expr, other):
    """No transposed copy of a ddc batch; the batch loop parallel, weighed by its rows so
    that 4 matrices are shared between the threads (at run time: sc_k_par_weighed)."""
    A, _ = batch_of((4, 300, 300), torch.float32, torch.int32, seed=2)
    sched, copies, text = schedule_and_copies(expr, A, torch.rand(*other))
    assert sched.startswith("schedule: order(b,i,j") and sched.endswith("parallel(b)")
    assert not copies
    assert "if(sc_k_par_weighed(" in text and "schedule(dynamic, sc_max(1, sc_min(64," in text


def test_transposed_batch_is_not_transposed_back():
    """A batch stored column-major within each matrix (ddc, levels b, j, i) is read in
    that order: before, its kernel transposed it back to ddc on every run, and the ddc
    one transposed it to (0,2,1)."""
    d = make_dense((3, 50, 40), dtype=torch.float64, seed=4)
    A = scorch.to_sparse(d, scorch.Format("ddc", order=(0, 2, 1)))
    x = torch.rand(3, 40, dtype=torch.float64)
    sched, copies, _ = schedule_and_copies("bij,bj->bi", A, x)
    assert sched == "schedule: order(b,j,i) parallel(b)" and not copies
    torch.testing.assert_close(scorch.einsum("bij,bj->bi", A, x), torch.einsum("bij,bj->bi", d, x))


def test_csf_batch_shared_between_threads():
    """A csf batch's few matrices (a compressed first level of 4 entries) are shared
    between the threads: the loop over them is weighed by their average rows times the
    dense extent inside (it was a dynamic loop that needed 128 entries)."""
    A, _ = batch_of((4, 300, 300), torch.float32, torch.int32, seed=5, fmt="csf")
    text = scorch.explain("bij,bjk->bik", A, torch.rand(4, 300, 16))
    assert "A1_pos_" in text.split("if(sc_k_par_weighed(")[1].split(")))")[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [2, 3, 5, 127])
def test_short_wide_matrix_against_dense(dtype, rows):
    """A csr matrix of a few long rows: its row loop is balanced across the threads from
    2 rows (it needed 128) where the entries reach the parallel threshold."""
    g = torch.Generator().manual_seed(rows)
    d = torch.where(torch.rand(rows, 40000, generator=g) < 0.3,
                    torch.randint(1, 9, (rows, 40000), generator=g).to(dtype),
                    torch.zeros((), dtype=dtype))
    A = scorch.to_sparse(d, "csr")
    x = torch.rand(40000, generator=g, dtype=dtype)
    X = torch.rand(40000, 16, generator=g, dtype=dtype)
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else {}
    torch.testing.assert_close(with_threads(2, lambda: A @ x), d @ x, **tol)
    torch.testing.assert_close(with_threads(2, lambda: A @ X), d @ X, **tol)
    text = scorch.explain("ij,j->i", A, x)
    assert "if(sc_k_par_worth((Ni_" in text and "), ((int64_t)A1_pos_" in text
    assert "return n >= 2 && work >= 8192;" in text


def test_matmul_broadcasts_a_batch_of_one_either_side():
    """torch.matmul broadcasts a batch of 1 (bmm does not): a sparse operand's as well as
    a dense one's, with gradients."""
    g = torch.Generator().manual_seed(seed_of("matmul-batch-1"))
    a1 = make_dense((1, 4, 5), torch.float64, seed_of("mb1"))
    b3 = torch.randn(3, 5, 2, dtype=torch.float64, generator=g, requires_grad=True)
    A1 = scorch.to_sparse(a1, "csf")
    out = torch.matmul(A1, b3)
    torch.testing.assert_close(out, a1 @ b3)
    out.pow(2).sum().backward()
    want, = torch.autograd.grad((a1 @ b3).pow(2).sum(), b3)
    torch.testing.assert_close(b3.grad, want)
    a3 = torch.randn(3, 2, 4, dtype=torch.float64, generator=g)
    B1 = scorch.to_sparse(make_dense((1, 4, 5), torch.float64, seed_of("mb2")), "csf")
    torch.testing.assert_close(torch.matmul(a3, B1), a3 @ B1.to_dense())
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.bmm(A1, b3)


@pytest.mark.parametrize("sa,sb", [
    ((2, 3, 4, 5), (2, 3, 5, 6)), ((2, 3, 4, 5), (3, 5, 6)), ((2, 3, 4, 5), (5, 6)),
    ((3, 4, 5), (5,)), ((2, 3, 4, 5), (5,)), ((5,), (2, 3, 5, 6)), ((4, 5), (2, 3, 5, 6)),
    ((1, 3, 4, 5), (2, 3, 5, 6)), ((2, 1, 4, 5), (2, 3, 5, 6))])
@pytest.mark.parametrize("sparse", ["left", "right"])
def test_matmul_of_more_dimensions_as_torch(sa, sb, sparse):
    """torch.matmul beyond 3-D and with a vector: 4-D attention probabilities times 4-D
    values, batches aligned from the right (and of 1, broadcast), a batch times a vector;
    refused before as "operands of 4 and 4 dimensions".  Gradients as dense."""
    x = make_dense(sa, torch.float64, seed_of("matmul-nd", sa, sb, 1))
    y = make_dense(sb, torch.float64, seed_of("matmul-nd", sa, sb, 2))
    fmt = {1: "csf", 2: "csr", 3: "csf", 4: "csf"}
    xs = scorch.to_sparse(x, fmt[len(sa)]) if sparse == "left" else x.clone()
    ys = scorch.to_sparse(y, fmt[len(sb)]) if sparse == "right" else y.clone()
    dense = ys if sparse == "left" else xs
    dense.requires_grad_()
    out = torch.matmul(xs, ys)
    torch.testing.assert_close(out.to_dense() if isinstance(out, scorch.SparseTensor) else out,
                               x @ y)
    (out * out).sum().backward()
    xd, yd = x.clone().requires_grad_(), y.clone().requires_grad_()
    ((xd @ yd) ** 2).sum().backward()
    torch.testing.assert_close(dense.grad, yd.grad if sparse == "left" else xd.grad)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        if sparse == "left":   # (contracted extents that differ)
            torch.matmul(xs, torch.ones(*sb[:-2], 7, *sb[-1:], dtype=torch.float64))
        else:
            torch.matmul(torch.ones(*sa[:-1], 7, dtype=torch.float64), ys)


def test_matmul_aliases_batches_and_torch_sparse_keywords():
    """torch.linalg.matmul is torch.matmul; unequal batches (neither 1) are torch's
    RuntimeError; torch.sparse's functions take their keyword names."""
    A3 = scorch.to_sparse(torch.eye(3).repeat(3, 1, 1), "csf")
    X = torch.rand(3, 3, 2)
    torch.testing.assert_close(torch.linalg.matmul(A3, X), torch.matmul(A3, X))
    A = scorch.to_sparse(torch.eye(3), "csr")
    torch.testing.assert_close(torch.linalg.matmul(A, X[0]), X[0])
    for call in (lambda: torch.matmul(A3, torch.ones(2, 3, 2)),
                 lambda: A3 @ torch.ones(2, 3, 2), lambda: torch.ones(2, 3, 3) @ A3):
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            call()
    S = scorch.to_sparse(torch.tensor([[1., 0, 2], [0, 3, 0]]), "csr")
    M1, M2, D = torch.rand(2, 4), torch.rand(4, 3), torch.rand(3, 2)
    torch.testing.assert_close(
        torch.sparse.sampled_addmm(input=S, mat1=M1, mat2=M2).to_dense(),
        torch.sparse.sampled_addmm(S, M1, M2).to_dense())
    torch.testing.assert_close(torch.sparse.mm(sparse=S, dense=D), torch.sparse.mm(S, D))
    torch.testing.assert_close(torch.sparse.addmm(input=torch.ones(2, 2), mat1=S, mat2=D),
                               1 + S.to_dense() @ D)


@pytest.mark.parametrize("fmt", ["ddc", "csf"])
def test_a_batch_times_its_transposed_view_stays_sparse(fmt):
    """A @ A.mT, bmm(A, A.mT) and einsum("bij,bkj->bik") of a ddc batch came back as a
    dense batch of n x n (no sparse index survives the sum over j); now in the first
    operand's format, as 2-D A @ A.t() gives csr; values and gradients as dense."""
    from conftest import make_dense, seed_of
    x = make_dense((3, 6, 5), torch.float64, seed_of("bmmT", fmt))
    A = scorch.to_sparse(x, fmt)
    for r in (A @ A.mT, torch.bmm(A, A.mT), torch.einsum("bij,bkj->bik", A, A)):
        assert isinstance(r, scorch.SparseTensor) and r.format == A.format
        torch.testing.assert_close(r.to_dense(), x @ x.mT)
    B = A.detach().clone().requires_grad_()
    (B @ B.mT).to_dense().pow(2).sum().backward()
    xd = x.clone().requires_grad_()
    (xd @ xd.mT).pow(2).sum().backward()
    torch.testing.assert_close(B.grad.to_dense(), xd.grad * (x != 0))
