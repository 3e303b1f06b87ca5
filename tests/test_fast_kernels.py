"""The fast paths of sparse-output kernels, against dense torch and scipy.

SpGEMM's Gustavson workspace (two-level bitmap, rows ordered in the output by a bitmap
scan or a sort) and SDDMM-like kernels whose output copies a sparse operand's pattern (no
count phase): every shape class (empty, 1x1, rectangular, all-zero rows), float32 and
float64, int32 and int64 indices, serial (< 128 rows) and parallel row loops.
"""
import numpy as np
import pytest
import scipy.sparse as sps
import torch

import scorch
from conftest import make_dense, seed_of, with_threads

DT = [torch.float32, torch.float64]
IT = [torch.int32, torch.int64]

SHAPES = [  # (A shape, B columns)
    ((0, 0), 0), ((1, 1), 1), ((0, 5), 3), ((5, 0), 3), ((6, 9), 0), ((7, 13), 5),
    ((13, 7), 11), ((200, 150), 170),
]
KINDS = ["random", "empty_rows", "zeros"]


def dense(shape, dtype, seed, kind="random"):
    """make_dense, with "empty_rows" read as "random" for shapes without rows."""
    return make_dense(shape, dtype, seed, "random" if 0 in shape and kind == "empty_rows"
                      else kind)


def sp(x, fmt, it):
    return scorch.to_sparse(x, fmt, index_dtype=it)


def exact(got, ref):
    """Values are small integers: every order of summation gives the same result."""
    g = got.to_dense() if isinstance(got, scorch.SparseTensor) else got
    assert g.shape == ref.shape
    assert torch.equal(g, ref)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape,nk", SHAPES, ids=lambda v: str(v))
def test_spgemm_csr(shape, nk, kind, it, dtype):
    s = seed_of("fast-spgemm", shape, nk, kind, it, dtype)
    a = dense(shape, dtype, s, kind)
    b = dense((shape[1], nk), dtype, s + 1)
    C = scorch.einsum("ij,jk->ik", sp(a, "csr", it), sp(b, "csr", it))
    assert isinstance(C, scorch.SparseTensor) and C.format.name == "csr"
    exact(C, a @ b)
    pos, crd = C.indices(1)
    for r in range(C.shape[0]):  # coordinates strictly increasing in every row
        row = crd[pos[r]:pos[r + 1]]
        assert bool((row[1:] > row[:-1]).all())


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fa,fb,fo", [("csr", "csr", "dcsr"), ("dcsr", "dcsr", None),
                                      ("csc", "csc", None), ("csr", "csr", "coo"),
                                      ("coo", "csr", "csr"), ("csr", "coo", None)])
@pytest.mark.parametrize("kind", KINDS)
def test_spgemm_formats(fa, fb, fo, kind, dtype):
    s = seed_of("fast-spgemm-fmt", fa, fb, fo, kind, dtype)
    a = make_dense((140, 30), dtype, s, kind)
    b = make_dense((30, 90), dtype, s + 1)
    C = scorch.einsum("ij,jk->ik", sp(a, fa, torch.int32), sp(b, fb, torch.int32),
                      out_format=fo)
    exact(C, a @ b)


def same_as_scipy(C, ref):
    """C (a csr SparseTensor) holds exactly scipy's product ref: pattern, sorted
    coordinates, values."""
    ref = sps.csr_array(ref)
    ref.sort_indices()
    got = C.to_scipy()
    assert np.array_equal(got.indptr, ref.indptr)
    assert np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data)
    return ref


def wide(n_rows, n_cols, per_row, seed, band=None):
    """scipy csr with per_row entries per row of small integer values: uniformly spread
    over n_cols (band None) or within band columns of the diagonal."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n_rows), per_row)
    if band is None:
        cols = rng.integers(0, n_cols, rows.size)
    else:
        centre = rows * (n_cols - 1) // max(n_rows - 1, 1)
        cols = np.clip(centre + rng.integers(-band, band + 1, rows.size), 0, n_cols - 1)
    vals = rng.integers(1, 5, rows.size).astype(np.float64)
    m = sps.csr_array((vals, (rows, cols)), shape=(n_rows, n_cols))
    m.sum_duplicates()
    return m


@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("case", ["banded", "spread", "mixed", "serial"])
def test_spgemm_wide_against_scipy(case, it):
    """Both orderings of a row: the bitmap scan (coordinates close together) and the sort
    (few coordinates over many summary words: 600 k columns span 147 of them)."""
    s = seed_of("fast-spgemm-wide", case, it)
    n = 60 if case == "serial" else 3000
    if case == "banded":
        a, b = wide(n, n, 12, s, band=20), wide(n, 600_000, 8, s + 1, band=300)
    elif case == "spread":
        a, b = wide(n, n, 3, s), wide(n, 600_000, 2, s + 1)
    else:
        a = wide(n, n, 6, s)
        b = sps.vstack([wide(n // 2, 600_000, 3, s + 1),
                        wide(n - n // 2, 600_000, 40, s + 2, band=2000)]).tocsr()
    C = scorch.einsum("ij,jk->ik", scorch.to_sparse(a, "csr", index_dtype=it),
                      scorch.to_sparse(b, "csr", index_dtype=it))
    same_as_scipy(C, a @ b)


def one_pass_case(case, seed):
    """(A, B, expr) for the one-pass SpGEMM assembly: rows bounded by their multiply
    counts (rows of 128 or more by their span too, but above 8), packed per thread, gaps
    between the threads' runs closed afterwards."""
    rng = np.random.default_rng(seed)
    if case == "tiny_and_huge":   # bounds from 0 to ~10^4 per row, big overestimates
        a = sps.vstack([wide(300, 400, 1, seed), sps.csr_array((200, 400)),
                        wide(100, 400, 60, seed + 1, band=5), wide(300, 400, 2, seed + 2)])
        return sps.csr_array(a), wide(400, 500, 40, seed + 3, band=30), "ij,jk->ik"
    if case == "all_collide":     # every product lands on the same 3 columns
        a = wide(2000, 50, 30, seed)
        b = sps.csr_array((rng.integers(1, 5, 150).astype(np.float64),
                           (np.repeat(np.arange(50), 3), np.tile([7, 8, 9], 50))),
                          shape=(50, 20))
        return a, b, "ij,jk->ik"
    if case == "aat":             # rectangular A·Aᵀ, read as ij,kj->ik
        a = wide(900, 3000, 25, seed)
        return a, a, "ij,kj->ik"
    if case == "denser_than_wide":  # 1200 products a row, 40 columns: bounds clamp to 40
        return wide(4000, 200, 60, seed), wide(200, 40, 20, seed + 1), "ij,jk->ik"
    if case == "narrow_span":     # 130-190 products a row on 5 columns: bounded by 9, not 5
        a = wide(2000, 50, 60, seed)
        b = sps.csr_array((rng.integers(1, 5, 250).astype(np.float64),
                           (np.repeat(np.arange(50), 5), np.tile(np.arange(5, 10), 50))),
                          shape=(50, 20))
        return a, b, "ij,jk->ik"
    if case == "banded":          # ~700 products a row over a span of ~50: bounded by it
        a = wide(3000, 3000, 27, seed, band=13)
        return a, a, "ij,jk->ik"
    if case == "moved_in_rounds":  # 2 threads: the second run (~360 k entries) moves
        # down by ~120 k (colliding banded rows first, uniform rows after): in parallel,
        # in 3 rounds of the gap's length
        c, u = wide(30000, 30000, 6, seed, band=3), wide(30000, 30000, 6, seed + 1)
        a = sps.csr_array(sps.vstack([c[:15000], u[15000:]]))
        return a, a, "ij,jk->ik"
    if case == "no_entries":      # many rows, nothing to multiply
        return sps.csr_array((3000, 40)), wide(40, 60, 5, seed), "ij,jk->ik"
    a = wide(2500, 2500, 8, seed)  # "uniform": bound close to the entry count
    return a, wide(2500, 2500, 8, seed + 1), "ij,jk->ik"


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ["tiny_and_huge", "all_collide", "aat", "no_entries",
                                  "uniform", "denser_than_wide", "narrow_span", "banded",
                                  "moved_in_rounds"])
def test_spgemm_one_pass(case, threads, it, dtype):
    """Exactly scipy's product (pattern, sorted unique coordinates, values) on one thread
    and on two (rows balanced by multiply count, runs packed and moved together), and
    the output's arrays hold exactly its entries."""
    a, b, expr = one_pass_case(case, seed_of("fast-spgemm-one-pass", case))
    npdt = np.float32 if dtype == torch.float32 else np.float64
    a, b = a.astype(npdt), b.astype(npdt)
    A = scorch.to_sparse(a, "csr", index_dtype=it)
    B = A if b is a else scorch.to_sparse(b, "csr", index_dtype=it)
    # (A·Aᵀ: the workspace order, chosen automatically)
    C = with_threads(threads, lambda: scorch.einsum(expr, A, B))
    assert isinstance(C, scorch.SparseTensor) and C.format.name == "csr"
    ref = same_as_scipy(C, a @ (b.T if expr == "ij,kj->ik" else b))
    pos, crd = C.indices(1)
    assert pos.dtype == it and crd.numel() == ref.nnz and C.values().numel() == ref.nnz


def dense_rows_case(seed):
    """(A, B) whose rows take every way of the one-pass fill, interleaved so that one
    thread's rows alternate between them: dense rows (a banded A row into banded B rows:
    hundreds of products over a span of tens of columns, up to the last column, and the
    column count not a multiple of 8), rows of 32 or more products over a wide span (the
    span pass, then the bitmap), and rows of few products (the bitmap alone).  Values
    of both signs, so some entries cancel to an explicit zero."""
    rng = np.random.default_rng(seed)
    n, nk = 3000, 5003
    b = sps.vstack([wide(1000, nk, 20, seed, band=10), wide(1000, nk, 12, seed + 1)]).tocsr()
    b.data *= rng.choice([-1.0, 1.0], b.nnz)
    rows, cols = [], []
    for r in range(n):
        kind = r % 3
        if kind == 0:    # dense: 9 banded B rows, 180 products within ~30 columns
            c = np.clip(r // 3 + np.arange(-4, 5), 0, 999)
        elif kind == 1:  # 4 spread B rows: 48 products over thousands of columns
            c = 1000 + rng.choice(1000, 4, replace=False)
        else:            # one spread B row: 12 products
            c = 1000 + rng.choice(1000, 1)
        rows += [r] * len(np.unique(c))
        cols += list(np.unique(c))
    vals = rng.integers(1, 4, len(rows)) * rng.choice([-1.0, 1.0], len(rows))
    a = sps.csr_array((vals, (rows, cols)), shape=(n, 2000))
    return a, b


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("threads", [1, 2])
def test_spgemm_dense_rows(threads, it, dtype):
    """Rows filled densely (adds and byte flags, scanned over the row's span) next to
    rows through the bitmap, on one thread and two: the structural pattern of the
    product (cancelled entries kept, as the bitmap keeps them) with exact values, and
    coordinates strictly increasing; the workspace each way leaves behind is clean for
    the other."""
    a, b = dense_rows_case(seed_of("fast-spgemm-dense-rows"))
    npdt = np.float32 if dtype == torch.float32 else np.float64
    a, b = a.astype(npdt), b.astype(npdt)
    A = scorch.to_sparse(a, "csr", index_dtype=it)
    B = scorch.to_sparse(b, "csr", index_dtype=it)
    assert "sc_k_scan" in scorch.explain("ij,jk->ik", A, B)
    C = with_threads(threads, lambda: scorch.einsum("ij,jk->ik", A, B))
    pattern = abs(a) @ abs(b)          # no cancellation: every structural entry
    pattern.sort_indices()
    got = C.to_scipy()
    assert np.array_equal(got.indptr, pattern.indptr)
    assert np.array_equal(got.indices, pattern.indices)
    assert np.array_equal(got.toarray(), (a @ b).toarray())
    assert (got.data == 0).any()       # the case does cancel somewhere


@pytest.mark.parametrize("dtype", DT)
def test_spgemm_merge_in_the_row_keeps_the_count_phase(dtype):
    """A·(B∘C): the loop over an output row co-iterates two rows, whose multiply count is
    no bound the lowering takes: the count phase stays, and the result is exact."""
    s = seed_of("fast-spgemm-merge-row", dtype)
    a = make_dense((300, 40), dtype, s, "empty_rows")
    b, c = make_dense((40, 90), dtype, s + 1), make_dense((40, 90), dtype, s + 2)
    A, B, C = (scorch.to_sparse(x, "csr") for x in (a, b, c))
    assert "phase 1: count" in scorch.explain("ij,jk,jk->ik", A, B, C)
    exact(scorch.einsum("ij,jk,jk->ik", A, B, C), a @ (b * c))


def test_spgemm_one_pass_skipped_rows_in_parallel():
    """A dcsr left operand visits only its stored rows (dynamic chunks on two threads):
    the rows in between stay empty and each chunk starts at its own bound offset."""
    s = seed_of("fast-spgemm-one-pass-dcsr")
    a = wide(4000, 300, 20, s)
    a = sps.csr_array(a.multiply(np.arange(4000)[:, None] % 3 == 0))
    a.eliminate_zeros()
    b = wide(300, 700, 30, s + 1)
    C = with_threads(2, lambda: scorch.einsum("ij,jk->ik", scorch.to_sparse(a, "dcsr"),
                                              scorch.to_sparse(b, "csr"), out_format="csr"))
    same_as_scipy(C, a @ b)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (0, 4), (4, 0), (7, 13), (13, 7),
                                   (300, 40)], ids=str)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_sddmm_pattern(fmt, shape, kind, it, dtype):
    s = seed_of("fast-sddmm", fmt, shape, kind, it, dtype)
    a = dense(shape, dtype, s, kind)
    u = dense((shape[0], 5), dtype, s + 1, "full")
    v = dense((shape[1], 5), dtype, s + 2, "full")
    A = sp(a, fmt, it)
    S = scorch.einsum("ij,ik,jk->ij", A, u, v)
    assert isinstance(S, scorch.SparseTensor) and S.format == A.format
    exact(S, a * (u @ v.t()))
    assert S.nnz == A.nnz
    for k in range(A.dim()):
        for x, y in zip(S.indices(k), A.indices(k)):
            if y is not None:
                assert torch.equal(x.to(torch.int64), y.to(torch.int64))


@pytest.mark.parametrize("dtype", DT)
def test_pattern_copy_keeps_explicit_zeros(dtype):
    """An explicit zero of A is an entry of the output (the pattern is data)."""
    A = scorch.from_components((3, 4), "csr", pos=[None, torch.tensor([0, 2, 2, 3])],
                               crd=[None, torch.tensor([1, 3, 0])],
                               values=torch.tensor([0.0, 2.0, 3.0], dtype=dtype))
    u, v = torch.ones(3, 2, dtype=dtype), torch.ones(4, 2, dtype=dtype)
    S = scorch.einsum("ij,ik,jk->ij", A, u, v)
    assert S.nnz == 3 and torch.equal(S.values(), torch.tensor([0.0, 4.0, 6.0], dtype=dtype))
    D = scorch.einsum("ij,ij->ij", A, torch.full((3, 4), 2.0, dtype=dtype))
    assert D.nnz == 3 and torch.equal(D.values(), torch.tensor([0.0, 4.0, 6.0], dtype=dtype))


def test_pattern_copy_only_where_provable():
    x = make_dense((150, 20), torch.float64, seed_of("fast-prov"), "empty_rows")
    y = make_dense((150, 20), torch.float64, seed_of("fast-prov", 1))
    A, B = sp(x, "csr", torch.int32), sp(y, "csr", torch.int32)
    u, v = torch.ones(150, 3, dtype=torch.float64), torch.ones(20, 3, dtype=torch.float64)
    assert "no count phase" in scorch.explain("ij,ik,jk->ij", A, u, v)
    assert "no count phase" in scorch.explain("ij,ij->ij", A, y)
    # an intersection (A * B) or a union (A + B) of two sparse operands counts
    assert "no count phase" not in scorch.explain("ij,ij->ij", A, B)
    exact(scorch.einsum("ij,ij->ij", A, B), x * y)
    exact(A + B, x + y)
