"""The one-pass SpGEMM's row bounds and the closing of the gaps between the threads' runs.

A row of 128 or more multiply-adds is bounded by its span too (the least first and the
greatest last coordinate of the B rows it adds up; the whole row walked only where its
first and last B rows span fewer columns than its products), but never below 9, so
that it takes the dense way and writes only its entries; the second thread's run then
moves down by its gap: on all threads, in rounds of the gap's length, where the gap is at least 16384
entries and the run 65536, else sequentially in blocks.

Checked against scipy's product (same pattern, rows ordered without repeats, values
close): rows of 130-190 products on 5 columns (bounded by 9, not 5; the last row too),
banded products (~300 products over a span of ~50), and rows whose second run moves in
parallel rounds; f32 and f64, int32 and int64 indices, one and two threads, and under
AddressSanitizer + UBSan (a write past a row's slot or across the moved runs)."""
import scorch
from conftest import run_combos, run_combos_sanitized

CODE = r'''
import numpy as np, scipy.sparse as sps, torch, scorch

def wide(n, cols, per, rng, band=None):
    rows = np.repeat(np.arange(n), per)
    if band is None:
        c = rng.integers(0, cols, rows.size)
    else:
        c = np.clip(rows * (cols - 1) // max(n - 1, 1) + rng.integers(-band, band + 1, rows.size),
                    0, cols - 1)
    m = sps.csr_array((rng.integers(1, 5, rows.size).astype(np.float64), (rows, c)),
                      shape=(n, cols))
    m.sum_duplicates()
    return m

def check(a, b, it, dt):
    npdt = np.float32 if dt == torch.float32 else np.float64
    a, b = a.astype(npdt), b.astype(npdt)
    C = scorch.to_sparse(a, "csr", index_dtype=it) @ scorch.to_sparse(b, "csr", index_dtype=it)
    ref = (a @ b).tocsr()
    ref.sort_indices()
    got = C.to_scipy()
    assert np.array_equal(got.indptr, ref.indptr)
    assert np.array_equal(got.indices, ref.indices)
    np.testing.assert_allclose(got.data, ref.data, rtol=1e-5 if npdt == np.float32 else 1e-12)

for dt, it in COMBOS:
    rng = np.random.default_rng(5)
    narrow_b = sps.csr_array((rng.integers(1, 5, 250).astype(np.float64),
                              (np.repeat(np.arange(50), 5), np.tile(np.arange(5, 10), 50))),
                             shape=(50, 20))
    band = wide(3000, 3000, 27, rng, band=13)
    c, u = wide(30000, 30000, 6, rng, band=3), wide(30000, 30000, 6, rng)
    rounds = sps.csr_array(sps.vstack([c[:15000], u[15000:]]))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        check(wide(2000, 50, 60, rng), narrow_b, it, dt)   # 130-190 products on 5 columns
        check(band, band, it, dt)                          # bounded by the span
        check(rounds, rounds, it, dt)                      # the second run moved in rounds
print("ok")
'''


def test_bounds_and_moves_against_scipy(tmp_path):
    run_combos(CODE, tmp_path)


def test_bounds_and_moves_sanitized(tmp_path):
    run_combos_sanitized(CODE, tmp_path)


def test_kernel_bounds_by_span_and_moves_in_rounds():
    """The generated C: the bound pass takes a row's span from 128 products (a probe of
    its first and last segments, stepping from one to the other, then the whole row),
    never below 9, above the rows of at most 8 that append their products with no span
    taken (rows that sort up to 128 products need no more: a bounded row is dense); the
    gap closing's parallel rounds."""
    import torch
    a = scorch.to_sparse(torch.eye(8), "csr")
    text = scorch.explain("ij,jk->ik", a, a)
    assert "if ((128 <= n_" in text and ", 9));" in text
    d = scorch.to_sparse(torch.eye(8, dtype=torch.float64), "csr")
    assert ", 9));" in scorch.explain("ij,jk->ik", d, d)
    assert " += sc_max(1, ((A1_end_" in text
    assert "#pragma omp parallel for num_threads(nt_) if((cn_" in text
