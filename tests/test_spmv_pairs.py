"""SpMV's row loop takes its rows two at a time: where both rows of a pair have at least 16
entries and the shorter at least 3/4 of the longer's, their segments run jammed in one loop
(two accumulators a row, then each row's rest); other pairs run row by row, and a thread's
last odd row alone; a thread whose rows average under 16 entries takes them one at a time.  Every case against the dense result, at 1 and 2 threads (a thread's
range may start on either row of a pair), both index widths and both dtypes (float64 rows
run one at a time: the jam was 5-10 % slower there, so f64 checks that no pair body is
emitted and that the rows still match)."""
import pytest
import torch

import scorch
from conftest import seed_of, with_threads

DT = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-4), torch.float64: dict(rtol=1e-12, atol=1e-10)}

# row lengths, in pairs: jammed (equal, at the bound 16, 17 with 22 at the 3/4 bound, odd
# lengths leaving a rest), not jammed (too unequal: 20 with 27; too short: 15 with 15; an
# empty row with a long one), then a last odd row
PATTERN = [20, 20, 16, 16, 17, 22, 31, 33, 20, 27, 15, 15, 0, 40, 24, 19, 8, 8, 30]


def rows_with_lengths(lengths, n_cols, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(len(lengths), n_cols, dtype=dtype)
    for r, n in enumerate(lengths):
        cols = torch.randperm(n_cols, generator=g)[:n]
        x[r, cols] = (torch.rand(n, generator=g, dtype=dtype) - 0.5) * 4
    return x


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("repeat", [1, 17])  # 19 rows on one thread; 323 rows, parallel
def test_paired_rows_match_dense(repeat, dtype, index_dtype, threads):
    x = rows_with_lengths(PATTERN * repeat, 64, dtype, seed_of("pairs", repeat, dtype))
    A = scorch.to_sparse(x, "csr", index_dtype=index_dtype)
    v = torch.rand(64, dtype=dtype, generator=torch.Generator().manual_seed(3))
    text = scorch.explain(torch.mv, A, v)
    if dtype == torch.float32:
        assert "+= 2)" in text and "(16 <= m_" in text, text[-3000:]
    else:   # f64 runs one row at a time: the jam was 5-10 % slower there
        assert "(16 <= m_" not in text, text[-3000:]
    got = with_threads(threads, lambda: torch.mv(A, v))
    torch.testing.assert_close(got, x @ v, **TOL[dtype])
    # a factor known per row multiplies each row of the pair by its own value
    d = torch.arange(1, x.shape[0] + 1, dtype=dtype)
    got = with_threads(threads, lambda: scorch.einsum("i,ij,j->i", d, A, v))
    torch.testing.assert_close(got, d * (x @ v), **TOL[dtype])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_pairs_only_in_ranges_of_long_rows(index_dtype, threads):
    """The pair loop runs only in a thread's range whose rows average 16 entries or more
    (pos[e] - pos[b] >= 16 (e - b)): long rows then short ones (at 2 threads one range
    pairs, the other does not), short rows around two jammable ones (no range pairs),
    and ranges right at the average of 16."""
    long_short = PATTERN * 9 + [3, 0, 5, 2, 1, 4] * 40
    sparse_pair = [2, 0, 1] * 50 + [20, 20] + [1, 3] * 50
    at_bound = [16] * 64 + [15, 17] * 32
    for k, lengths in enumerate((long_short, sparse_pair, at_bound)):
        x = rows_with_lengths(lengths, 300, torch.float32, seed_of("pair-ranges", k))
        A = scorch.to_sparse(x, "csr", index_dtype=index_dtype)
        v = torch.rand(300, generator=torch.Generator().manual_seed(k))
        assert ">= (int64_t)16 * (" in scorch.explain(torch.mv, A, v)
        got = with_threads(threads, lambda: torch.mv(A, v))
        torch.testing.assert_close(got, x @ v, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", DT)
def test_paired_rows_shapes(dtype):
    """1×1, a single long row, two rows, an all-zero matrix, and a rectangular one."""
    for shape, lengths in (((1, 1), [1]), ((1, 40), [40]), ((2, 40), [18, 18]),
                           ((4, 30), [0, 0, 0, 0]), ((3, 70), [60, 50, 70])):
        x = rows_with_lengths(lengths, shape[1], dtype, seed_of("pair-shapes", shape))
        A = scorch.to_sparse(x, "csr")
        v = torch.rand(shape[1], dtype=dtype)
        torch.testing.assert_close(torch.mv(A, v), x @ v, **TOL[dtype])
        torch.testing.assert_close(A @ v, x @ v, **TOL[dtype])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", DT)
def test_paired_row_sums_and_row_dots(dtype, threads):
    """The other row sums over one compressed segment take the pair body too: a row sum
    (ij->i) and a row-wise dot product with a dense matrix (ij,ij->i)."""
    x = rows_with_lengths(PATTERN * 17, 64, dtype, seed_of("pair-sums", dtype))
    A = scorch.to_sparse(x, "csr")
    B = torch.rand(x.shape, dtype=dtype, generator=torch.Generator().manual_seed(5))
    for expr, ops, want in (("ij->i", (A,), x.sum(1)), ("ij,ij->i", (A, B), (x * B).sum(1))):
        assert ("+= 2)" in scorch.explain(expr, *ops)) == (dtype == torch.float32)
        got = with_threads(threads, lambda: scorch.einsum(expr, *ops))
        torch.testing.assert_close(got, want, **TOL[dtype])
