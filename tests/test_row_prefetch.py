"""Dense rows prefetched from beyond the last-level cache (lower/build.c row_flag,
row_prefetch): SpMM's B(j,:) and SDDMM's C(j,:), read at a segment's coordinate, are
requested ROW_AHEAD entries early where the operand outgrows env->cache_bytes and the
segment's rows lie far apart.  Each such segment loop is built twice, with and without
the prefetches, and one run-time flag per segment picks the copy.

Everywhere else in the suite the cache is the machine's (tens of MiB), so the small
operands there take the copy without prefetches; the subprocess tests here set
SCORCH_CACHE_BYTES to 1 KiB, so far-apart rows take the prefetching copy and banded ones
still do not: both copies are checked against dense, for every register tile width, the grouped SDDMM path and
its runs of short rows, 32- and 64-bit coordinates, f32 and f64, and under
AddressSanitizer + UBSan (the entry ahead is clamped to the level's last)."""
import pytest
import torch

import scorch
from conftest import run_code, run_combos, run_combos_sanitized

# Shared by the in-process and the subprocess checks: matrices whose rows are far apart
# (random columns), banded (consecutive columns: the flag is off), rows of one entry,
# empty and all-zero rows, and a COO input with duplicates.
CHECKS = r'''
import torch, scorch

def far(rows, cols, g, dt):
    lens = torch.cat([torch.arange(0, 70, 3), torch.tensor([1, 1, 0, 9, 40, 2])])
    lens = lens[torch.randperm(len(lens), generator=g)][:rows]
    d = torch.zeros(len(lens), cols, dtype=dt)
    for r, k in enumerate(lens.tolist()):
        c = torch.randperm(cols, generator=g)[:k]
        d[r, c] = torch.rand(k, dtype=dt, generator=g) + 0.5
    return d

def banded(rows, dt):
    d = torch.zeros(rows, rows, dtype=dt)
    for o in (-2, -1, 0, 1, 2):
        d += torch.diag(torch.full((rows - abs(o),), 1.0 + o, dtype=dt), o)
    return d

def dup_coo(cols, dt):
    i = torch.tensor([[0, 0, 0, 2, 2, 5], [7, 7, cols - 1, 3, 900, 0]])
    v = torch.tensor([1.0, 2.0, 4.0, 8.0, -1.0, 3.0], dtype=dt)
    return torch.sparse_coo_tensor(i, v, (6, cols))

def check(dt, index_dtype):
    g = torch.Generator().manual_seed(7)
    tol = dict(rtol=1e-4, atol=1e-4) if dt == torch.float32 else {}
    mats = [far(30, 3000, g, dt), banded(300, dt), torch.zeros(4, 2000, dtype=dt),
            dup_coo(2000, dt)]
    for m in mats:
        d = m.to_dense() if m.is_sparse else m
        A = scorch.to_sparse(m, "csr", index_dtype=index_dtype)
        rows, cols = d.shape
        # K = 16: SpMM's unrolled one-vector tile, SDDMM's one-vector dots; 48: the
        # half tiles; 256: four full tiles, SDDMM's whole row of 1 KiB (f32) or 2 KiB
        # (f64: never prefetched)
        for K in (16, 48, 256):
            X = torch.rand(cols, K, dtype=dt, generator=g) - 0.5
            torch.testing.assert_close(A @ X, d @ X, **tol)
            Q = torch.rand(rows, K, dtype=dt, generator=g) - 0.5
            S = torch.einsum("ij,ik,jk->ij", A, Q, X)
            torch.testing.assert_close(S.to_dense(), d * (Q @ X.T), **tol)
        k = scorch.kernel("C(i,k) = -2 * A(i,j) * B(j,k)", A="csr", B="dense")
        torch.testing.assert_close(k(A, X), -2 * (d @ X), **tol)

for dt, it in COMBOS:
    check(dt, it)
print("ok")
'''


def _source(expr, *ops):
    return scorch.explain(expr, *ops)


def test_copies_are_built_for_spmm_and_sddmm():
    """SpMM and SDDMM kernels carry the flag and both copies; SpMV (a vector, gathered
    by its own prefetch) and a product whose dense operand is read along its rows in
    the other order do not."""
    A = scorch.to_sparse(torch.eye(8), "csr")
    X, Y, x = torch.rand(8, 64), torch.rand(8, 64), torch.rand(8)
    for src in (scorch.explain(torch.mm, A, X), _source("ij,ik,jk->ij", A, Y, X)):
        assert "env->cache_bytes" in src and "rowpf" in src
        assert "__builtin_prefetch(&B_vals" in src or "__builtin_prefetch(&C_vals" in src
    assert "rowpf" not in scorch.explain(torch.mv, A, x)
    assert "rowpf" not in _source("ij,kj->ik", A, torch.rand(5, 8))


def test_with_prefetches_against_dense(tmp_path):
    run_combos(CHECKS, tmp_path, SCORCH_CACHE_BYTES="1024")


def test_with_prefetches_sanitized(tmp_path):
    run_combos_sanitized(CHECKS, tmp_path, SCORCH_CACHE_BYTES="1K")


def test_bad_cache_size_falls_back(tmp_path):
    """A SCORCH_CACHE_BYTES that is not a positive size is ignored (the machine's cache
    size is used): kernels still run and agree with dense."""
    code = ("import torch, scorch\nA = scorch.to_sparse(torch.eye(40)[:, :33] * 2, 'csr')\n"
            "X = torch.rand(33, 16)\ntorch.testing.assert_close(A @ X, torch.eye(40)[:, :33] * 2 @ X)\n"
            "print('ok')")
    for bad in ("-5", "lots", "0", "12Q"):
        run_code(code, tmp_path, SCORCH_CACHE_BYTES=bad)


# Rows prefetched under a lower bound than the reported cache (SCORCH_CACHE_BYTES=1G
# here): CASES (dtype, K) against a sparse matrix of ROWS rows of PER entries at random
# columns of COLS, the kernel's source holding NEEDLE (all set before this program);
# both copies agree with dense.
_BOUNDED = r'''
torch.set_num_threads(2)
g = torch.Generator().manual_seed(3)
for dt, K in CASES:
    src = scorch.explain("ij,jk->ik", scorch.to_sparse(torch.eye(2, dtype=dt), "csr"),
                         torch.ones(2, K, dtype=dt))
    assert NEEDLE in src, src
    i = torch.stack([torch.arange(ROWS).repeat_interleave(PER),
                     torch.randint(0, COLS, (ROWS * PER,), generator=g)])
    A = torch.sparse_coo_tensor(i, torch.rand(ROWS * PER, dtype=dt, generator=g),
                                (ROWS, COLS)).coalesce()
    S, d = scorch.to_sparse(A, "csr"), A.to_dense()
    X = torch.rand(COLS, K, dtype=dt, generator=g)
    torch.testing.assert_close(S @ X, d @ X)
    Q = torch.rand(ROWS, K, dtype=dt, generator=g)
    torch.testing.assert_close(torch.einsum("ij,ik,jk->ij", S, Q, X).to_dense(), d * (Q @ X.T))
print("ok")
'''


@pytest.mark.parametrize("cases,needle,rows,per,cols", [
    # rows of one 64-byte line (K = 16 f32, K = 8 f64) from an operand of 32 MiB or
    # more (a host's shared L3); a wider row (K = 32 f32) not
    ("((torch.float32, 16), (torch.float64, 8), (torch.float32, 32))", "33554432", 12, 5,
     1 << 19),
    # rows of at most 256 bytes (K = 64 f32, K = 32 f64) from 1.5 MiB per thread (2
    # threads, an 8 MiB operand); a row of 512 bytes (K = 128 f32) not
    ("((torch.float32, 64), (torch.float64, 32), (torch.float32, 128))",
     "(int64_t)nt_ * 1572864", 40, 7, 1 << 15),
])
def test_rows_prefetched_below_the_reported_cache(tmp_path, cases, needle, rows, per, cols):
    """Rows prefetched from operands smaller than the cache sysfs reports, SpMM and SDDMM:
    the kernel carries the bound, and both copies agree with dense."""
    code = (f"import torch, scorch\nCASES = {cases}\nNEEDLE = {needle!r}\n"
            f"ROWS, PER, COLS = {rows}, {per}, {cols}\n" + _BOUNDED)
    run_code(code, tmp_path, SCORCH_CACHE_BYTES="1G")
