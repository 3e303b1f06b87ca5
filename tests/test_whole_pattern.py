"""Sparse outputs with an operand's whole pattern (dcsr, dcsc, coo, csf: a compressed
first level, which the csr-like sharing does not cover): an SDDMM, a sampled elementwise
product or a row scaling whose one sparse factor has the output's levels takes that
operand's pos and crd arrays and writes each value at its entry's own position, with no
count phase — so a compressed first level runs in parallel (dcsr SDDMM was sequential,
2.3x slower than csr on soc-Slashdot0902).  Each COO duplicate is an entry of its own
(the product is linear in the operand's value, so the duplicates' products add up to the
product of their sum), and COO's column level is a plain segment per row: grouped dot
products as csr's rows have.  Checked against dense: formats, dtypes, index
widths, edge shapes, duplicates, third order, gradients; the arrays shared, the caller's
tensors untouched."""
import pytest
import torch

import scorch
from conftest import make_dense
from test_coo_parallel import coo_with_duplicates

SHAPES = [(40, 30), (1, 1), (0, 4), (5, 0), (64, 3)]
EXPRS = {"ij,ik,jk->ij": lambda d, U, V, r: d * (U @ V.T),
         "ij,ij->ij": lambda d, U, V, r: d * (U @ V.T),
         "ij,i->ij": lambda d, U, V, r: d * r[:, None]}


def operands(expr, A, shape, dtype):
    g = torch.Generator().manual_seed(sum(shape) + 5)
    U = torch.rand(shape[0], 16, generator=g, dtype=dtype)
    V = torch.rand(shape[1], 16, generator=g, dtype=dtype)
    r = torch.rand(shape[0], generator=g, dtype=dtype)
    ops = {"ij,ik,jk->ij": (A, U, V), "ij,ij->ij": (A, U @ V.T), "ij,i->ij": (A, r)}[expr]
    return ops, U, V, r


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}


def schedule(expr, *ops):
    text = scorch.explain(expr, *ops)
    return next(l for l in text.splitlines() if l.startswith("schedule:")).split(": ", 1)[1]


def shares(out, a):
    return all(x is None or y is None or x.data_ptr() == y.data_ptr()
               for x, y in zip(out._pos + out._crd, a._pos + a._crd))


@pytest.mark.parametrize("expr", sorted(EXPRS))
@pytest.mark.parametrize("fmt", ["dcsr", "dcsc", "coo"])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_against_dense(expr, fmt, it, dtype, shape):
    d = make_dense(shape, dtype=dtype, seed=sum(shape) + 11,
                   kind="empty_rows" if 0 not in shape else "random")
    A = scorch.to_sparse(d, fmt, index_dtype=it)
    ops, U, V, r = operands(expr, A, shape, dtype)
    before = [x.clone() for x in ops[1:]] + [A.values().clone()]
    out = scorch.einsum(expr, *ops)
    assert out.format == A.format and out.index_dtype == it
    torch.testing.assert_close(out.to_dense(), EXPRS[expr](d, U, V, r), **tol(dtype))
    assert out.nnz == A.nnz and shares(out, A)
    assert all(torch.equal(x, y) for x, y in zip(ops[1:], before[:-1]))
    assert torch.equal(A.values(), before[-1])
    if fmt == "dcsr" and shape == (40, 30):
        assert schedule(expr, *ops).endswith("parallel(i)")
    if fmt == "dcsc" and shape == (40, 30):
        assert schedule(expr, *ops).endswith("parallel(j)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
def test_coo_duplicates(dtype, it):
    """Each position of a run of repeated coordinates is an entry of the product: its own
    value times the row's and column's dot product, so the output (the operand's
    pattern) sums to the right matrix.  Rows long enough for groups of 8 dot products."""
    for shape, K in (((37, 29), 16), ((12, 90), 19)):
        A, d = coo_with_duplicates(shape, dtype, it, seed=47)
        U = torch.rand(shape[0], K, dtype=dtype)
        V = torch.rand(shape[1], K, dtype=dtype)
        out = scorch.einsum("ij,ik,jk->ij", A, U, V)
        assert out.nnz == A.nnz and shares(out, A)
        torch.testing.assert_close(out.to_dense(), d * (U @ V.T), **tol(dtype))
        rows, cols = A._crd[0].long(), A._crd[1].long()
        each = A.values() * (U[rows] * V[cols]).sum(1)
        torch.testing.assert_close(out.values(), each, **tol(dtype))


def test_third_order():
    """A CSF operand scaled along its first index keeps its whole pattern."""
    g = torch.Generator().manual_seed(3)
    d = torch.rand(20, 9, 7, generator=g, dtype=torch.float64)
    d = d * (torch.rand(20, 9, 7, generator=g) < 0.2)
    A = scorch.to_sparse(d, "csf")
    r = torch.rand(20, generator=g, dtype=torch.float64)
    out = scorch.einsum("ijk,i->ijk", A, r)
    assert out.format == A.format and shares(out, A)
    torch.testing.assert_close(out.to_dense(), d * r[:, None, None])


def test_gradients_through_a_dcsr_sddmm():
    d = make_dense((30, 25), dtype=torch.float64, seed=13, kind="empty_rows")
    A = scorch.to_sparse(d, "dcsr")
    Av = A.values().clone().requires_grad_()
    U = torch.rand(30, 8, dtype=torch.float64, requires_grad=True)
    V = torch.rand(25, 8, dtype=torch.float64, requires_grad=True)
    out = scorch.einsum("ij,ik,jk->ij", A.with_values(Av), U, V)
    W = torch.rand(30, 25, dtype=torch.float64)
    (out.to_dense() * W).sum().backward()
    Ud, Vd = U.detach().clone().requires_grad_(), V.detach().clone().requires_grad_()
    dd = d.clone().requires_grad_()
    ((dd * (Ud @ Vd.T)) * W).sum().backward()
    torch.testing.assert_close(U.grad, Ud.grad)
    torch.testing.assert_close(V.grad, Vd.grad)
    torch.testing.assert_close(A.with_values(Av.grad).to_dense(), dd.grad * (d != 0))


@pytest.mark.parametrize("fmt", ["dcsr", "dcsc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_enough_for_the_parallel_region(fmt, dtype):
    """Enough entries and work (≥ 128 outer entries, ≥ 8192 multiply-adds) that the
    kernel's parallel region runs on two threads: the same values as dense."""
    d = make_dense((700, 600), dtype=dtype, seed=29, kind="empty_rows", density=0.05)
    A = scorch.to_sparse(d, fmt)
    g = torch.Generator().manual_seed(30)
    U = torch.rand(700, 16, generator=g, dtype=dtype)
    V = torch.rand(600, 16, generator=g, dtype=dtype)
    text = scorch.explain("ij,ik,jk->ij", A, U, V)
    assert "#pragma omp parallel" in text and "parallel(" in text
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = scorch.einsum("ij,ik,jk->ij", A, U, V)
    finally:
        torch.set_num_threads(threads)
    assert out.format == A.format and shares(out, A)
    torch.testing.assert_close(out.to_dense(), d * (U @ V.T), **tol(dtype))


def _coo_sddmm_on_two_threads(A, U, V):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        return scorch.einsum("ij,ik,jk->ij", A, U, V)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
def test_coo_runs_in_parallel_split_between_runs(dtype, it):
    """COO's rows are a non-unique level: each thread takes a share of the positions whose
    ends are moved past a run of equal rows (sc_ir_runsplit), so no row is split between
    threads — duplicates included (each an entry of its own)."""
    A, d = coo_with_duplicates((700, 600), dtype, it, seed=61)
    g = torch.Generator().manual_seed(62)
    U = torch.rand(700, 16, generator=g, dtype=dtype)
    V = torch.rand(600, 16, generator=g, dtype=dtype)
    text = scorch.explain("ij,ik,jk->ij", A, U, V)
    assert schedule("ij,ik,jk->ij", A, U, V).endswith("parallel(i)")
    assert "#pragma omp parallel" in text and "sc_k_runsplit" in text
    before = (A.values().clone(), U.clone(), V.clone())
    out = _coo_sddmm_on_two_threads(A, U, V)
    assert out.format == A.format and out.nnz == A.nnz and shares(out, A)
    torch.testing.assert_close(out.to_dense(), d * (U @ V.T), **tol(dtype))
    assert all(torch.equal(x, y) for x, y in zip((A.values(), U, V), before))


@pytest.mark.parametrize("rows", [[0], [3, 3, 4], [5, 699]])
def test_coo_runs_that_cover_the_split_points(rows):
    """Every entry in one row (the whole range one run: one thread takes it all), or a few
    rows holding most entries, so that the even split points fall inside runs."""
    g = torch.Generator().manual_seed(sum(rows))
    d = torch.zeros(700, 600, dtype=torch.float64)
    for r in rows:
        d[r] = torch.rand(600, generator=g, dtype=torch.float64) + 0.5
    d[torch.rand(700, 600, generator=g) < 0.01] = 1.0
    A = scorch.to_sparse(d, "coo")
    U = torch.rand(700, 16, generator=g, dtype=torch.float64)
    V = torch.rand(600, 16, generator=g, dtype=torch.float64)
    out = _coo_sddmm_on_two_threads(A, U, V)
    torch.testing.assert_close(out.to_dense(), d * (U @ V.T))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("n", [5, 3000])
def test_one_dimensional_coo_duplicates_each_written(n, dtype):
    """A 1-D coo (one non-unique level: its first and last) whose pattern the output
    shares, times a dense factor over another index: every duplicate is an entry of its
    own, written at its position (the run of duplicates had been summed into its first
    entry and the others left unwritten: garbage values)."""
    g = torch.Generator().manual_seed(n)
    crd = torch.sort(torch.randint(0, max(1, n // 4), (n,), generator=g)).values
    vals = torch.randint(-5, 6, (n,), generator=g).to(dtype)
    A = scorch.from_components((max(1, n // 4),), "coo", pos=[torch.tensor([0, n])],
                               crd=[crd], values=vals)
    z = torch.tensor([2, 3, -1], dtype=dtype)
    for expr, ops, per_entry in [("k,z->k", (A, z), vals * z.sum()),
                                 ("k,->k", (A, torch.tensor(3, dtype=dtype)), vals * 3)]:
        r = scorch.einsum(expr, *ops)
        assert isinstance(r, scorch.SparseTensor) and r.nnz == n
        assert torch.equal(r.values(), per_entry)
        torch.testing.assert_close(r.to_dense(), torch.einsum(expr, *[
            o.to_dense() if isinstance(o, scorch.SparseTensor) else o for o in ops]))
