"""SDDMM over runs of short rows (lower/build.c short_rows): rows of fewer entries than a
group (8, or the vector's lane count) are taken run by run as one segment, in groups
that cross row boundaries, each entry's row searched from the group's first row
(sc_k_rowof32/64: 16 or 8 rows' ends in one AVX-512 compare, a step a row past them).
Against dense, with the row patterns that decide where runs start and end: empty rows
inside and at the ends of runs, more empty rows in a row than one compare covers, runs
shorter and longer than a group, a run ending a thread's range, long rows between runs,
at one and two threads (each thread splits its own range into runs); also with the
kernels built under ASan and UBSan."""
import pytest
import torch

import scorch
from conftest import run_code, sanitized_env


def _rows(lengths, n, seed):
    """A dense matrix whose row r has lengths[r] entries at distinct random columns."""
    g = torch.Generator().manual_seed(seed)
    d = torch.zeros(len(lengths), n, dtype=torch.float64)
    for r, k in enumerate(lengths):
        cols = torch.randperm(n, generator=g)[:k]
        d[r, cols] = torch.rand(k, generator=g, dtype=torch.float64) + 0.5
    return d


def _lengths(kind, m):
    g = torch.Generator().manual_seed(m)
    if kind == "short":      # every row under a group, some empty
        return torch.randint(0, 8, (m,), generator=g).tolist()
    if kind == "mixed":      # runs of short rows between long ones
        return [12 if r % 9 == 4 else int(x) for r, x in enumerate(torch.randint(0, 6, (m,), generator=g))]
    if kind == "edges":      # empty rows at the ends, single-entry rows, one 7 and one 8
        return [0, 0, 1, 7, 8, 1, 0, 3, 0, 0] * (m // 10) + [0] * (m % 10)
    if kind == "empty-runs":  # long rows separated by empty ones
        return [0 if r % 3 else 20 for r in range(m)]
    if kind == "gaps":       # 7, 8, 9, 15, 16, 17 and 40 empty rows between short ones
        block = [2] + [0] * 17 + [1, 3] + [0] * 8 + [1] + [0] * 16 + [4, 1] + [0] * 9 + [2] \
            + [0] * 15 + [1] + [0] * 7 + [5] + [0] * 40
        return (block * (m // len(block) + 1))[:m]
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["short", "mixed", "edges", "empty-runs", "gaps"])
@pytest.mark.parametrize("m", [1, 9, 300])
@pytest.mark.parametrize("K", [1, 16, 19, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_runs_against_dense(kind, m, K, dtype, threads):
    n = 40
    d = _rows(_lengths(kind, m), n, seed=m + K).to(dtype)
    U = torch.rand(m, K, dtype=dtype)
    V = torch.rand(n, K, dtype=dtype)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for index_dtype in (torch.int32, torch.int64):
            A = scorch.to_sparse(d, "csr", index_dtype=index_dtype)
            S = scorch.einsum("ij,ik,jk->ij", A, U, V)
            assert torch.equal(S._crd[1], A._crd[1])
            tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else {}
            torch.testing.assert_close(S.to_dense(), d * (U @ V.T), **tol)
    finally:
        torch.set_num_threads(old)


def test_runs_in_the_generated_code():
    """A group's entries find their rows by the search (bounded by the run's end), the
    cursor moving to the last one's row; the entries after the last group step a row at a
    time."""
    d = _rows(_lengths("mixed", 300), 40, seed=1).float()
    for index_dtype, bits in ((torch.int32, 32), (torch.int64, 64)):
        A = scorch.to_sparse(d, "csr", index_dtype=index_dtype)
        text = scorch.explain("ij,ik,jk->ij", A, torch.rand(300, 16), torch.rand(40, 16))
        code = text.split("generated C", 1)[1]
        kernel = code[code.index("(const sc_tensor *const *ops"):]
        assert "int64_t re_" in kernel and "while ((A1_pos_0[(r_" in kernel
        assert f"= sc_k_rowof{bits}(A1_pos_0, r_" in kernel and ", re_" in kernel
        assert kernel.count(f"sc_k_rowof{bits}(") % 8 == 0   # each entry of a group of 8


SANITIZED = r"""
import torch, scorch
from test_sddmm_runs import _rows, _lengths
torch.set_num_threads(2)
for kind in ("gaps", "short", "edges"):
    for m in (9, 300):
        for dtype in (torch.float32, torch.float64):
            d = _rows(_lengths(kind, m), 40, seed=m).to(dtype)
            U, V = torch.rand(m, 16, dtype=dtype), torch.rand(40, 16, dtype=dtype)
            for index_dtype in (torch.int32, torch.int64):
                A = scorch.to_sparse(d, "csr", index_dtype=index_dtype)
                S = scorch.einsum("ij,ik,jk->ij", A, U, V)
                torch.testing.assert_close(S.to_dense(), d * (U @ V.T), rtol=1e-5, atol=1e-6)
print("ok")
"""


def test_runs_sanitized(tmp_path):
    """The row search reads the ends of rows r + 1 .. end only (masked loads stop at the
    run's end), under ASan and UBSan."""
    san = sanitized_env()
    if san is None:
        pytest.skip("gcc's ASan/UBSan runtimes are not installed")
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    run_code(f"import sys; sys.path.insert(0, {here!r})\n" + SANITIZED, tmp_path, **san)


def test_autograd_through_runs():
    """dA of A @ X is an SDDMM at A's pattern: short rows take the runs."""
    d = _rows(_lengths("short", 200), 30, seed=2)
    A = scorch.to_sparse(d, "csr").requires_grad_()
    X = torch.rand(30, 16, dtype=torch.float64)
    G = torch.rand(200, 16, dtype=torch.float64)
    (A @ X).backward(G)
    torch.testing.assert_close(A.grad.to_dense(), (G @ X.T) * (d != 0))
