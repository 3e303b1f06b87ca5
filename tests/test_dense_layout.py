"""The schedule chooses dense layouts: a dense operand that the innermost loop (a dense
one) reads along a level other than its last is copied into the loop order's layout
where the copy costs less than the loop (A·Bᵀ with a dense B runs as a SpMM over Bᵀ),
and a dense output strided along the innermost loop is still accumulated in register
tiles, stored a lane at a time (Gᵀ·A, F.linear's weight gradient, runs over A's columns
in parallel).  Checked against dense: formats, dtypes, index widths, edge shapes, COO
duplicates, the C driver's own conversion, forced schedules, partial tiles; the caller's
tensor is never written and a change made through ``.data`` is always seen (the C driver
copies it before every run)."""
import pytest
import torch

import scorch
from scorch import _compiler
from conftest import make_dense

RELAID = "  transposed before running to dd (1,0)"


def lines(text, start):
    return [l for l in text.splitlines() if l.startswith(start)]


def schedule(expr, *ops, **kw):
    return lines(scorch.explain(expr, *ops, **kw), "schedule:")[0].split(": ", 1)[1]


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}


SHAPES = [(40, 30), (1, 1), (0, 4), (5, 0), (64, 3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_bt_reads_a_transposed_copy(fmt, it, dtype, shape):
    d = make_dense(shape, dtype=dtype, seed=sum(shape) + 7, density=0.5,
                   kind="empty_rows" if 0 not in shape else "random")
    A = scorch.to_sparse(d, fmt, index_dtype=it)
    B = torch.rand(24, shape[1], dtype=dtype, generator=torch.Generator().manual_seed(5))
    before = B.clone()
    if shape == (40, 30):
        text = scorch.explain("ij,kj->ik", A, B)
        assert lines(text, RELAID)
        assert "unit stride" in lines(text, RELAID)[0]
        assert schedule("ij,kj->ik", A, B) == "order(i,j,k) parallel(i)"
    out = scorch.einsum("ij,kj->ik", A, B)
    torch.testing.assert_close(out, d @ B.t(), **tol(dtype))
    assert out.is_contiguous()
    assert torch.equal(B, before)
    B.data.mul_(-2)        # (no version bump): the next call must see it
    torch.testing.assert_close(scorch.einsum("ij,kj->ik", A, B), -2 * d @ before.t(),
                               **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
def test_a_bt_over_coo_duplicates(dtype, it):
    from test_coo_parallel import coo_with_duplicates
    A, d = coo_with_duplicates((37, 29), dtype, it, seed=43)
    B = torch.rand(16, 29, dtype=dtype)
    assert lines(scorch.explain("ij,kj->ik", A, B), RELAID)
    torch.testing.assert_close(scorch.einsum("ij,kj->ik", A, B), d @ B.t(), **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kernel_as_asked_converts_the_dense_operand(dtype):
    """The kernel as compiled expects the transposed layout: the C driver copies the dense
    operand into it before the run, and the call runs that very kernel."""
    d = make_dense((40, 30), dtype=dtype, seed=8, density=0.5)
    A = scorch.to_sparse(d, "csr")
    B = torch.rand(24, 30, dtype=dtype)
    entry, descs, _ = _compiler._compile(_compiler._LANG_EINSUM, "ij,kj->ik", (A, B), None,
                                      None, pretranspose=False)
    assert [(t, f.order) for t, f in entry[4]] == [(1, (1, 0))]
    torch.testing.assert_close(_compiler._run(entry, descs), d @ B.t(), **tol(dtype))
    ran = _compiler._compile(_compiler._LANG_EINSUM, "ij,kj->ik", (A, B), None, None)[0]
    assert ran is entry


def test_forced_orders():
    """A written order gets the copy where it reads B across its rows, not where it
    reads B along them."""
    d = make_dense((40, 30), dtype=torch.float64, seed=9, density=0.5)
    A = scorch.to_sparse(d, "csr")
    B = torch.rand(24, 30, dtype=torch.float64)
    for s, relaid in (("order(i,j,k) parallel(i)", True), ("order(i,k,j) parallel(i)", False),
                      ("order(k,i,j) parallel(k)", False)):
        sched = scorch.Schedule(s)
        assert bool(lines(scorch.explain("ij,kj->ik", A, B, schedule=sched), RELAID)) == relaid
        torch.testing.assert_close(scorch.einsum("ij,kj->ik", A, B, schedule=sched), d @ B.t())


def test_layouts_kept():
    """No copy where it buys nothing or cannot be one: a B of one row, a B read by two
    accesses, a B whose copy costs more than the product (a nearly empty A)."""
    d = make_dense((40, 30), dtype=torch.float64, seed=10, density=0.5)
    A = scorch.to_sparse(d, "csr")
    one = torch.rand(1, 30, dtype=torch.float64)
    assert not lines(scorch.explain("ij,kj->ik", A, one), RELAID)
    torch.testing.assert_close(scorch.einsum("ij,kj->ik", A, one), d @ one.t())
    B = torch.rand(24, 30, dtype=torch.float64)
    k = scorch.kernel("C(i,k) = A(i,j) * B(k,j) * B(k,j)", A="csr", B="dense")
    assert not lines(k.explain(A, B), RELAID)
    torch.testing.assert_close(k(A, B), d @ (B * B).t())
    e = torch.zeros(40, 30, dtype=torch.float64)
    e[3, 4] = 2.0
    E = scorch.to_sparse(e, "csr")
    assert not lines(scorch.explain("ij,kj->ik", E, B), RELAID)
    torch.testing.assert_close(scorch.einsum("ij,kj->ik", E, B), e @ B.t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K", [16, 48, 64, 100, 3])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_strided_output_in_register_tiles(fmt, K, dtype):
    """Gᵀ·A into a (k, j) output: columns of A outermost in parallel, G's rows summed in
    vector registers per column, the tile stored down the output's column (full and
    partial tiles, and K below one vector)."""
    d = make_dense((50, 40), dtype=dtype, seed=K, kind="empty_rows")
    A = scorch.to_sparse(d, fmt)
    G = torch.rand(50, K, dtype=dtype, generator=torch.Generator().manual_seed(K))
    if K >= 16:
        assert schedule("ak,aj->kj", G, A) == "order(j,a,k) parallel(j)"
    out = scorch.einsum("ak,aj->kj", G, A)
    assert out.is_contiguous()
    torch.testing.assert_close(out, G.t() @ d, **tol(dtype))
    forced = scorch.einsum("ak,aj->kj", G, A, schedule=scorch.Schedule("order(j,a,k)"))
    torch.testing.assert_close(forced, G.t() @ d, **tol(dtype))


def test_linear_weight_gradient():
    """F.linear(x, W) with x sparse: W's gradient (Gᵀ·x) equals dense; the forward read
    a transposed copy of W, W itself untouched."""
    g = torch.Generator().manual_seed(14)
    x = torch.randn(60, 40, generator=g, dtype=torch.float64)
    x = x * (torch.rand(60, 40, generator=g) < 0.3)
    X = scorch.to_sparse(x, "csr")
    W = torch.randn(32, 40, generator=g, dtype=torch.float64, requires_grad=True)
    W0 = W.detach().clone()
    Wd = W.detach().clone().requires_grad_(True)
    gy = torch.randn(60, 32, generator=g, dtype=torch.float64)
    torch.nn.functional.linear(X, W).backward(gy)
    torch.nn.functional.linear(x, Wd).backward(gy)
    torch.testing.assert_close(W.grad, Wd.grad)
    assert torch.equal(W.detach(), W0)
