"""SpMV's short rows, around every cut of the row loop and the 64 KiB size of x that
once gated their masked gathers: rows of every length 0..17 and a few long ones, checked
against dense for 32- and 64-bit coordinates, 1 and 2 threads, and products with
literals and negation; f64 alike.  Where the CPU's gathers are slow (the suite's
setting, SCORCH_GATHERS=0) no row is gathered, short ones neither (lower/build.c: on a
Cascade Lake the short rows' masked gathers took usroads from 1.00 to 1.74 of torch.mv's
time); where they are fast a row of 1-4 entries is summed from a quarter vector, 5-8
from a half, the lanes past the row's length masked off (gathered_row's short_sums:
tests/test_spmv_gathered_rows.py, which runs them in child processes, under ASan and
without AVX-512VL too)."""
import re

import pytest
import torch

import scorch

GATE = {torch.float32: 16384, torch.float64: 8192}   # 64 KiB of x (the gate they had)


def _matrix(dt, n, g):
    """Rows of every length 0..17 (twice, shuffled), and a few long ones."""
    lens = torch.cat([torch.arange(18), torch.arange(18), torch.tensor([0, 40, 65, 1])])
    lens = lens[torch.randperm(len(lens), generator=g)]
    rows = len(lens)
    r = torch.repeat_interleave(torch.arange(rows), lens)
    c = torch.cat([torch.randperm(n, generator=g)[:k] for k in lens.tolist()])
    d = torch.zeros(rows, n, dtype=dt)
    d[r, c] = torch.rand(len(r), dtype=dt, generator=g) + 0.5
    return d


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("side", ["below", "at"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_short_rows_against_dense(dt, side, index_dtype):
    n = GATE[dt] - (side == "below")
    g = torch.Generator().manual_seed(n)
    d = _matrix(dt, n, g)
    x = torch.rand(n, dtype=dt, generator=g) - 0.5
    A = scorch.to_sparse(d, "csr", index_dtype=index_dtype)
    src = scorch.explain(torch.mv, A, x)
    assert "gathers: slow" in src
    assert re.search(r"sc_vgathern_\w+\(\w+_vals_", src) is None   # a call, not the helper
    threads = torch.get_num_threads()
    try:
        for th in (1, 2):
            torch.set_num_threads(th)
            ref = (d.double() @ x.double()).to(dt)
            torch.testing.assert_close(A @ x, ref)
            torch.testing.assert_close(torch.mv(A, x), ref)
            k = scorch.kernel("y(i) = -2 * A(i,j) * x(j)", A="csr", x="dense")
            torch.testing.assert_close(k(A, x), -2 * ref)
            rows = d.shape[0]
            torch.testing.assert_close(scorch.einsum("i,ij,j->i", x[:rows], A, x), x[:rows] * ref)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_edge_shapes(dt):
    """All-zero rows only, one row of one entry, a matrix without rows, duplicates summed."""
    n = GATE[dt]
    x = torch.rand(n, dtype=dt)
    for d in (torch.zeros(5, n, dtype=dt), torch.zeros(0, n, dtype=dt)):
        torch.testing.assert_close(scorch.to_sparse(d, "csr") @ x, d @ x)
    d = torch.zeros(1, n, dtype=dt)
    d[0, n - 1] = 3.0
    torch.testing.assert_close(scorch.to_sparse(d, "csr") @ x, d @ x)
    i = torch.tensor([[0, 0, 0, 1], [7, 7, n - 1, 2]])
    v = torch.tensor([1.0, 2.0, 4.0, 8.0], dtype=dt)
    coo = torch.sparse_coo_tensor(i, v, (2, n))
    torch.testing.assert_close(scorch.to_sparse(coo, "csr") @ x, coo.to_dense() @ x)


def test_nonfinite_values_stay_in_their_rows():
    """An inf or nan in x reaches only the rows that read it: masked lanes read nothing."""
    n = GATE[torch.float32]
    d = torch.zeros(4, n)
    d[0, 5] = 1.0
    d[1, [5, 6]] = 2.0
    d[2, 9] = 1.0
    x = torch.ones(n)
    x[9] = float("inf")
    x[10] = float("nan")
    y = scorch.to_sparse(d, "csr") @ x
    assert y[0] == 1.0 and y[1] == 4.0 and y[2] == float("inf") and y[3] == 0.0
