"""SDDMM's grouped dot products (GROUP = 8 entries of a row at a time, their lane sums by
one transpose-and-add tree; the segment's last entries one at a time) against the dense
result: every dot-product length around the vector widths (16 float32 / 8 float64 lanes,
the scalar rest), rows of 0..17 entries so that every remainder of a group occurs, empty,
1x1, all-zero and rectangular operands, csr and csr with int64 indices, serial and
parallel row loops, a sampled factor that is not a bare operand, and the group written as
one vector where the factor is the entry's own value."""
import numpy as np
import pytest
import torch

import scorch
from conftest import seed_of

DT = [torch.float32, torch.float64]
KS = [1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 64]


def pattern(n, m, seed, per_row=None):
    """An n x m dense matrix whose row i has per_row(i) nonzeros (capped by m)."""
    rng = np.random.default_rng(seed)
    a = np.zeros((n, m))
    for i in range(n):
        c = min(m, per_row(i) if per_row else int(rng.integers(0, 18)))
        cols = rng.choice(m, size=c, replace=False)
        a[i, cols] = rng.uniform(-1, 1, c)
    return a


def check(a, K, dtype, it=torch.int32, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.from_numpy(a).to(dtype)
    u = torch.rand(a.shape[0], K, generator=g, dtype=dtype) - 0.5
    v = torch.rand(a.shape[1], K, generator=g, dtype=dtype) - 0.5
    A = scorch.to_sparse(a, "csr", index_dtype=it) if it != torch.int32 else scorch.to_sparse(a, "csr")
    S = scorch.einsum("ij,ik,jk->ij", A, u, v)
    assert S.nnz == A.nnz
    ref = a * (u @ v.t())
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(S.to_dense(), ref, rtol=tol, atol=tol * max(1, K))


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("K", KS)
def test_every_row_length_and_K(dtype, K):
    # rows of 0..17 entries, twice over (every remainder of a group of 8, 0..2 groups)
    check(pattern(36, 40, seed_of("grp", K), lambda i: i % 18), K, dtype)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("K", [3, 16, 33])
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (0, 5), (5, 0), (3, 40), (40, 3), (300, 70)])
def test_shapes(dtype, K, shape):
    check(pattern(*shape, seed_of("grp-shape", K, shape)), K, dtype)


@pytest.mark.parametrize("dtype", DT)
def test_all_zero_and_full_rows(dtype):
    check(np.zeros((9, 12)), 16, dtype)
    check(pattern(200, 64, seed_of("grp-full"), lambda i: 64), 17, dtype)  # parallel rows


def test_int64_indices():
    check(pattern(150, 30, seed_of("grp-i64")), 16, torch.float32, torch.int64)


@pytest.mark.parametrize("dtype", DT)
def test_sampled_factor_product_and_explain(dtype):
    """Known factors that are a product (A(i,j)·D(i,j)) multiply the grouped sums."""
    a = torch.from_numpy(pattern(20, 25, seed_of("grp-scale"), lambda i: 9 + i % 9)).to(dtype)
    d = torch.rand(20, 25, dtype=dtype)
    u, v = torch.rand(20, 16, dtype=dtype), torch.rand(25, 16, dtype=dtype)
    A = scorch.to_sparse(a, "csr")
    out = scorch.einsum("ij,ij,ik,jk->ij", A, d, u, v)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out.to_dense(), a * d * (u @ v.t()), rtol=tol, atol=tol)
    src = scorch.explain("ij,ik,jk->ij", A, u, v)
    assert "pmain_" in src and "sc_hsum_" in src
    # the known factor is more than the entry's own value: each sum taken from its lane
    src = scorch.explain("ij,ij,ik,jk->ij", A, d, u, v)
    assert "float dot_" in src or "double dot_" in src


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("K", [5, 16, 33])
def test_group_written_as_one_vector(dtype, K):
    """Where the only known factor is the entry's own value, a group's sums come out of
    the fold tree in the entries' order (its last step, fold0, for float32's 16 lanes) and
    the group's values times them are stored as one vector, in long rows and in runs of
    short rows alike; the reduction's last partial vector is a masked step, not a scalar
    loop per entry."""
    a = pattern(40, 50, seed_of("grp-vec", K), lambda i: (3, 11, 24)[i % 3])
    check(a, K, dtype)
    A = scorch.to_sparse(torch.from_numpy(a).to(dtype), "csr")
    src = scorch.explain("ij,ik,jk->ij", A, torch.rand(40, K, dtype=dtype),
                         torch.rand(50, K, dtype=dtype))
    tag = "f32" if dtype == torch.float32 else "f64"
    lanes = int(src.split("vectors: ", 1)[1].split(" ", 1)[0]) // (4 if tag == "f32" else 8)
    G = min(lanes, 8)
    assert "dot_" not in src
    if G < lanes:   # float32's 16 lanes: 8 entries, masked
        assert f"= sc_fold0_{tag}(fold_" in src
        assert src.count(f"sc_vstoren_{tag}(&out_vals_") == 4  # long rows (2 copies), runs (2)
        assert f"(sc_vloadn_{tag}(&A_vals_3[p_" in src and f"], {G}) * fold_" in src
    else:           # as many entries as lanes: whole vectors
        assert src.count(f"*(sc_v{tag}u *)&out_vals_") == 4
        assert f"((*(const sc_v{tag}u *)&A_vals_3[p_" in src
    assert f"n_20 += {G};" in src  # a long row's output position moves past the group


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("n", [70, 78, 84, 115])
def test_entries_streamed_ahead(dtype, n):
    """Each row (or run of short rows) of a csr SDDMM requests A's crd and vals, and the
    output's vals for writing, 1024 entries past its first, and only while that entry
    exists: matrices of about 900 to 1500 entries, so that the requests fall short of the
    arrays' end for none, some or most rows, against dense.  SpMV and SpMM rows do not stream (their short rows paid
    for the requests when warm)."""
    a = pattern(n, 80, seed_of("stream", n), lambda i: 16 if i % 5 else 2)
    assert 900 < np.count_nonzero(a) < 1600
    check(a, 16, dtype)
    A = scorch.to_sparse(torch.from_numpy(a).to(dtype), "csr")
    src = scorch.explain("ij,ik,jk->ij", A, torch.rand(n, 16, dtype=dtype),
                         torch.rand(80, 16, dtype=dtype))
    assert src.count(" + 1024) < A1_len_2)) {") == 2      # long rows, runs of short rows
    assert src.count("__builtin_prefetch(&out_vals_15[(A1_pos_0[i_17] + 1024)], 1);") == 2
    assert src.count("__builtin_prefetch(&A1_crd_1[(A1_pos_0[i_17] + 1024)]);") == 2
    x = torch.rand(80, dtype=dtype)
    assert " + 1024)" not in scorch.explain("ij,j->i", A, x)
    assert " + 1024)" not in scorch.explain("ij,jk->ik", A, torch.rand(80, 16, dtype=dtype))
