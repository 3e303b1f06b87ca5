"""SpGEMM rows above 8 multiply-adds take one of two ways, chosen per row from the span
of their coordinates: dense (adds into the zeroed workspace and byte flags, scanned over
the span) where the span is under 4x the row's products, or 16x under 32 products; else
the two-level bitmap, marked with no branch: every product writes its coordinate at the
end of the row's slot and moves the end by whether the mark was new, so the slot must
hold every product.  A row whose products outnumber the columns (its slot capped at the
column count) spans less than its bound and goes dense.  The bitmap's collect scans all
of its summary words when they are few next to the row's entries (the set's extent is
passed in), else the words the row spans.

Checked against dense, with each output row ordered and free of repeats: graph-like rows
of 9-60 products over wide spans with and without repeated columns; grid rows (short,
span under 16x); rows whose products outnumber the columns, last row included; column
counts where the collect scans every summary word and where it scans the row's span;
f32 and f64, int32 and int64 indices, one and two threads, and under AddressSanitizer +
UBSan (a write past a row's slot, the last row's past the output's arrays)."""
import torch

import scorch
from conftest import CHECK_CSR, run_combos, run_combos_sanitized

CODE = r'''
import torch, scorch
''' + CHECK_CSR + r'''

def graph(n, m, cols, pool, dt, g):
    """A (n x m) with 3-12 entries a row, B (m x cols) with 2-6 entries a row on columns
    drawn from `pool` columns spread over all of them (a small pool repeats columns)."""
    picks = torch.linspace(0, cols - 1, pool).long()
    a = torch.zeros(n, m, dtype=dt)
    b = torch.zeros(m, cols, dtype=dt)
    for r in range(n):
        k = int(torch.randint(3, 13, (1,), generator=g))
        a[r, torch.randperm(m, generator=g)[:k]] = torch.randint(1, 5, (k,), generator=g).to(dt)
    for j in range(m):
        k = int(torch.randint(2, 7, (1,), generator=g))
        c = picks[torch.randint(0, pool, (k,), generator=g)]
        b[j, c] = torch.randint(-4, 5, (k,), generator=g).to(dt)
    return a, b

def grid(s, dt):
    """The 5-point stencil of an s x s grid: A @ A has rows of about 25 products over a
    span of about 4s columns."""
    n = s * s
    a = torch.zeros(n, n, dtype=dt)
    for i in range(n):
        a[i, i] = 4.0
        for j in (i - 1, i + 1, i - s, i + s):
            if 0 <= j < n and (abs(j - i) == s or j // s == i // s):
                a[i, j] = -1.0
    return a

for dt, it in COMBOS:
    tol = dict(rtol=1e-5, atol=1e-4) if dt == torch.float32 else {}
    g = torch.Generator().manual_seed(11)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        # wide spans: 20000 columns (5 summary words, scanned whole) and 2^17 (32
        # words: the span of a row of under 8 entries), pools with repeats (40) and
        # without (every column)
        for cols, pool in ((20000, 40), (20000, 20000), (1 << 17, 40), (1 << 17, 1 << 17)):
            a, b = graph(40, 60, cols, pool, dt, g)
            A = scorch.to_sparse(a, "csr", index_dtype=it)
            B = scorch.to_sparse(b, "csr", index_dtype=it)
            check(A @ B, a @ b, tol)
        a = grid(12, dt)
        A = scorch.to_sparse(a, "csr", index_dtype=it)
        check(scorch.einsum("ij,jk->ik", A, A), a @ a, tol)
        # rows whose products outnumber the columns (6 and 40), the last one too, at
        # the very end of the output's arrays; and rows of exactly as many products
        for cols in (6, 40):
            a = torch.zeros(20, 200, dtype=dt)
            b = torch.zeros(200, cols, dtype=dt)
            for r in range(20):
                k = cols + 3 if r % 2 or r == 19 else cols
                a[r, (7 * r + torch.arange(k)) % 200] = 1.0 + r % 3
            for j in range(200):
                b[j, j % cols] = 1.0 + j % 5
                b[j, (3 * j + 1) % cols] = -2.0
            A = scorch.to_sparse(a, "csr", index_dtype=it)
            B = scorch.to_sparse(b, "csr", index_dtype=it)
            check(A @ B, a @ b, tol)
        # rows of 1-400 entries, enough of them for the bound pass to run in parallel
        # (rows split between the threads by their entries)
        lens = (torch.arange(700) * 37) % 400 + 1
        a = torch.zeros(700, 700, dtype=dt)
        for r in range(700):
            a[r, torch.randperm(700, generator=g)[:int(lens[r]) // 20 + 1]] = 1.0 + r % 4
        a[::50] = torch.rand(14, 700, generator=g, dtype=dt) < 0.5
        A = scorch.to_sparse(a, "csr", index_dtype=it)
        assert A.nnz >= 8192
        check(A @ A, a @ a, tol)
        # all-zero and empty products
        z = torch.zeros(30, 30, dtype=dt)
        Z = scorch.to_sparse(z, "csr", index_dtype=it)
        check(Z @ Z, z, tol)
print("ok")
'''


def test_row_paths_against_dense(tmp_path):
    run_combos(CODE, tmp_path)


def test_row_paths_sanitized(tmp_path):
    run_combos_sanitized(CODE, tmp_path)


def test_kernel_marks_without_a_branch():
    """The bitmap rows of the generated C mark with sc_k_mark_new (no branch on the
    mark), the span pass runs for every row above 8 products and the collect gets the
    workspace's extent."""
    A = scorch.to_sparse(torch.eye(20), "csr")
    src = scorch.explain("ij,jk->ik", A, A)
    assert "= sc_k_mark_new(ws_bits_" in src and "if (sc_k_mark(" not in src
    assert "? 16 : 4) * bnd_" in src and "(32 <= bnd_" not in src
    assert ", 1, ws_s_" in src
