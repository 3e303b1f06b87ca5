"""SpGEMM rows of 9 to 64 multiply-adds whose columns spread too wide for the dense
fill (a graph's rows) are appended to the row's slot and sorted, like the rows of at
most 8, where the output has int32 coordinates and 32-bit values and the target
AVX-512: the sort runs in vector registers (sc_k_sortsumv_32_*, up to 8 vectors of 8
keys, each key the coordinate and the value's bits), and equal coordinates are summed
within and across the vectors.  Elsewhere such rows keep the bitmap.

Checked against a reference accumulated entry by entry: rows of 0-72 products (both
sides of 8, 16, 32 and 64, where the network's size changes, and past the threshold),
their columns distinct and spread, in two long runs (crossing vectors) with one far
column, in runs of three, and random with repeats; f32 and int32 values with int32
indices (the sorted path), f32 with int64 and f64 with int32 (the bitmap), one and two
threads, and under AddressSanitizer + UBSan."""
import torch

from conftest import CHECK_CSR, run_code, sanitized_env

import pytest

CODE = r'''
import torch, scorch
''' + CHECK_CSR + r'''

N = 4001          # the output's columns: a prime, so t * 397 % N is distinct for t < N


def column(r, t, p, g):
    kind = r % 4
    if kind == 0:                          # distinct, spread over the row
        return (r * 131 + t * 397) % N
    if kind == 1:                          # two long runs, then one far column
        return N - 1 if t == p - 1 else 7 if t < p // 2 else 8
    if kind == 2:                          # runs of three, the last far out
        return N - 1 - r % 3 if t == p - 1 else 50 * (t // 3) + r % 5
    return int(torch.randint(0, 40, (1,), generator=g)) * 100   # random, repeats


def rows_of_products(dt, it, g):
    """A (n x m) and B (m x N): row r of A·B has r % 73 products; B's rows have one
    entry each.  The reference adds every product into a dense row."""
    n = 4 * 73
    ai, aj, av, bi, bj, bv = [], [], [], [], [], []
    ref = torch.zeros(n, N, dtype=torch.float64)
    j = 0
    for r in range(n):
        p = r % 73
        for t in range(p):
            x = float(torch.randint(1, 5, (1,), generator=g))
            y = float(torch.randint(1, 5, (1,), generator=g)) * (-1) ** (t % 3 == 1)
            c = column(r, t, p, g)
            ai.append(r); aj.append(j); av.append(x)
            bi.append(j); bj.append(c); bv.append(y)
            ref[r, c] += x * y
            j += 1
    a = torch.sparse_coo_tensor(torch.tensor([ai, aj]), torch.tensor(av, dtype=dt), (n, j))
    b = torch.sparse_coo_tensor(torch.tensor([bi, bj]), torch.tensor(bv, dtype=dt), (j, N))
    return (scorch.to_sparse(a, "csr", index_dtype=it), scorch.to_sparse(b, "csr", index_dtype=it),
            ref.to(dt))

g = torch.Generator().manual_seed(11)
for dt, it in COMBOS:
    for threads in (1, 2):
        torch.set_num_threads(threads)
        A, B, ref = rows_of_products(dt, it, g)
        check(scorch.einsum("ij,jk->ik", A, B), ref, dict(rtol=0, atol=0))
        check(A @ B, ref, dict(rtol=0, atol=0))
print("ok")
'''

COMBOS_ALL = ("import torch\nCOMBOS = [(torch.float32, torch.int32), (torch.int32, torch.int32), "
              "(torch.float32, torch.int64), (torch.float64, torch.int32)]\n")
COMBOS_SAN = "import torch\nCOMBOS = [(torch.float32, torch.int32), (torch.int32, torch.int32)]\n"


def test_sorted_rows_against_reference(tmp_path):
    run_code(COMBOS_ALL + CODE, tmp_path)


def test_sorted_rows_sanitized(tmp_path):
    san = sanitized_env()
    if san is None:
        pytest.skip("gcc's ASan/UBSan runtimes are not installed")
    run_code(COMBOS_SAN + CODE, tmp_path, **san)


def test_kernel_sorts_rows_up_to_64_products():
    """With int32 coordinates, 32-bit values and 64-byte vectors, a row of 9 to 64
    products that is not dense takes sc_k_sortsumv_32_* before the bitmap; f64 values
    and int64 coordinates keep the bitmap for those rows (no such sort for them)."""
    import scorch
    A = scorch.to_sparse(torch.eye(20), "csr")
    src = scorch.explain("ij,jk->ik", A, A)
    if "vectors: 64 bytes" not in src:
        pytest.skip("scorch writes narrower vectors on this machine")
    assert "<= 64) && (bnd_" in src and "= sc_k_sortsumv_32_f32(out_crd_" in src
    for dt, it in ((torch.float64, torch.int32), (torch.float32, torch.int64)):
        src = scorch.explain("ij,jk->ik", *[scorch.to_sparse(torch.eye(20, dtype=dt), "csr",
                                                             index_dtype=it)] * 2)
        assert "<= 64) && (bnd_" not in src and "= sc_k_sortsumv" not in src, (dt, it)
