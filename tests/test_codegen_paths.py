"""The code paths the scheduler picks by shape, against the dense result: register tiles of
a dense output (SpMM: tiles of 4 vectors, of one vector and a partial one, so every width
around those boundaries), four accumulators per compressed row (SpMV: rows of every length
modulo 4), the value of the sampling operand hoisted out of a dot product (SDDMM), and
outputs left without a zero fill only where every element is written."""
import pytest
import torch

import scorch
from conftest import make_dense, seed_of

DT = [torch.float32, torch.float64]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12,
                                                                           atol=1e-10)


def rows_of_every_length(n_rows, n_cols, dtype, seed):
    """Row r has r % 11 entries (0..10): every remainder of the unrolled loops."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n_rows, n_cols, dtype=dtype)
    for r in range(n_rows):
        cols = torch.randperm(n_cols, generator=g)[: r % 11]
        x[r, cols] = torch.randint(1, 9, (len(cols),), generator=g).to(dtype)
    return x


# widths around the f32 tiles (16, 64) and the f64 ones (8, 32)
WIDTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 48, 49, 63, 64, 65, 80,
          100, 112, 129]


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("k", WIDTHS)
def test_spmm_tile_widths(k, dtype):
    s = seed_of("tile", k, dtype)
    x = rows_of_every_length(23, 13, dtype, s)
    X = make_dense((13, k), dtype, s + 1, "full")
    got = scorch.einsum("ij,jk->ik", scorch.to_sparse(x, "csr"), X)
    torch.testing.assert_close(got, x @ X, **tol(dtype))


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsr", "csc"])
@pytest.mark.parametrize("k", [5, 16, 40])
def test_spmm_tiles_skipped_rows_stay_zero(fmt, k, dtype):
    """Formats whose outer loop skips empty rows: those output rows must still be 0."""
    s = seed_of("tile-skip", fmt, k, dtype)
    x = make_dense((200, 30), dtype, s, "empty_rows")
    X = make_dense((30, k), dtype, s + 1, "full")
    got = scorch.einsum("ij,jk->ik", scorch.to_sparse(x, fmt), X)
    torch.testing.assert_close(got, x @ X, **tol(dtype))


@pytest.mark.parametrize("dtype", DT)
def test_spmm_tiles_large_parallel(dtype):
    """Enough rows for the parallel loop; every row written by exactly one thread."""
    s = seed_of("tile-par", dtype)
    x = make_dense((700, 90), dtype, s, density=0.05)
    X = make_dense((90, 70), dtype, s + 1, "full")
    got = scorch.einsum("ij,jk->ik", scorch.to_sparse(x, "csr"), X)
    torch.testing.assert_close(got, x @ X, **tol(dtype))


@pytest.mark.parametrize("dtype", DT)
def test_vector_matrix_tile(dtype):
    """No output variable outside the tile: out(k) = sum_j a(j) X(j,k)."""
    s = seed_of("vm", dtype)
    a = make_dense((40,), dtype, s, density=0.3)
    X = make_dense((40, 37), dtype, s + 1, "full")
    got = scorch.einsum("j,jk->k", scorch.to_sparse(a, "c"), X)
    torch.testing.assert_close(got, a @ X, **tol(dtype))


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csf", "dense"])
def test_tile_with_reduction_outside(fmt, dtype):
    """order(l,i,k,j): a reduction variable above the rows, so each row is revisited and
    its tiles must add into a zero-filled output."""
    s = seed_of("tile-red", fmt, dtype)
    t = make_dense((3, 12, 9), dtype, s)
    X = make_dense((9, 20), dtype, s + 1, "full")
    T = scorch.to_sparse(t, "csf") if fmt == "csf" else t
    if fmt == "dense":
        T = scorch.to_sparse(t, "ddc")          # dense outer levels: rows reached in full
    got = scorch.einsum("lik,kj->ij", T, X, schedule="order(l,i,k,j) parallel(none)")
    torch.testing.assert_close(got, torch.einsum("lik,kj->ij", t, X), **tol(dtype))
    text = scorch.explain("lik,kj->ij", T, X, schedule="order(l,i,k,j) parallel(none)")
    big = "sc_vf32 acc_" if dtype == torch.float32 else "sc_vf64 acc_"
    assert big in text and "sc_k_alloc(env, out_size" in text
    # the partial tile (20 = 16 + 4 lanes) adds its first lanes into the output
    assert "sc_vstoren_f%d(&out_vals_" % (32 if dtype == torch.float32 else 64) in text


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "dense"])
@pytest.mark.parametrize("k", [3, 16, 17, 64, 100])
def test_tile_known_factors_scale_the_store(fmt, k, dtype):
    """A row scale known above a register tile (out(i,k) = A(i,j) X(j,k) r(i): the mean
    aggregation) multiplies each accumulator once as it is stored, not every entry's
    product; with csc's order (j, i, k) A's value is known above the tile too.  Also
    written transposed (a strided tile) and with X transposed (strided along k)."""
    s = seed_of("tile-known", fmt, k, dtype)
    x = rows_of_every_length(41, 23, dtype, s)
    A = scorch.to_sparse(x, fmt)
    X = make_dense((23, k), dtype, s + 1, "full")
    r = make_dense((41,), dtype, s + 2, "full")
    want = (x @ X) * r[:, None]
    torch.testing.assert_close(scorch.einsum("ij,jk,i->ik", A, X, r), want, **tol(dtype))
    torch.testing.assert_close(scorch.einsum("ij,jk,i->ki", A, X, r), want.t(), **tol(dtype))
    torch.testing.assert_close(scorch.einsum("ij,kj,i->ik", A, X.t().contiguous(), r), want,
                               **tol(dtype))
    if fmt == "csr":
        text = scorch.explain("ij,jk,i->ik", A, X, r)
        scaled = [ln for ln in text.splitlines() if "C_vals" in ln and "ops[" not in ln]
        assert scaled and all("out_vals" in ln and "+=" not in ln for ln in scaled), scaled


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csr", "dcsr", "coo"])
def test_spmv_unrolled_rows(fmt, dtype):
    s = seed_of("spmv-unroll", fmt, dtype)
    x = rows_of_every_length(150, 40, dtype, s)
    v = make_dense((40,), dtype, s + 1, "full")
    got = scorch.einsum("ij,j->i", scorch.to_sparse(x, fmt), v)
    torch.testing.assert_close(got, x @ v, **tol(dtype))


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("k", [1, 3, 8, 16, 17, 64])
def test_sddmm_hoisted_value(k, dtype):
    s = seed_of("sddmm-hoist", k, dtype)
    x = rows_of_every_length(30, 20, dtype, s)
    U = make_dense((30, k), dtype, s + 1, "full")
    V = make_dense((20, k), dtype, s + 2, "full")
    got = scorch.einsum("ij,ik,jk->ij", scorch.to_sparse(x, "csr"), U, V)
    torch.testing.assert_close(got.to_dense(), x * (U @ V.t()), **tol(dtype))
    # a literal and a second sampled operand are hoisted together
    A = scorch.to_sparse(x, "csr")
    k2 = scorch.kernel("C(i,j) = 2 * A(i,j) * B(i,j) * U(i,k) * V(j,k)", A="csr", B="csr",
                       U="dense", V="dense")
    got2 = k2(A, A, U, V)
    torch.testing.assert_close(got2.to_dense(), 2 * x * x * (U @ V.t()), **tol(dtype))


@pytest.mark.parametrize("dtype", DT)
def test_empty_and_one_by_one(dtype):
    for shape, k in [((0, 5), 16), ((5, 0), 16), ((1, 1), 1), ((1, 1), 17), ((3, 4), 0)]:
        x = make_dense(shape, dtype, 3)
        X = make_dense((shape[1], k), dtype, 4, "full")
        got = scorch.einsum("ij,jk->ik", scorch.to_sparse(x, "csr"), X)
        torch.testing.assert_close(got, x @ X, **tol(dtype))
        got = scorch.einsum("ij,j->i", scorch.to_sparse(x, "csr"), X[:, 0] if k else
                            torch.zeros(shape[1], dtype=dtype))
        assert got.shape == (shape[0],)


@pytest.mark.parametrize("dtype", DT)
def test_all_zero_matrix(dtype):
    x = torch.zeros(50, 30, dtype=dtype)
    X = make_dense((30, 24), dtype, 5, "full")
    got = scorch.einsum("ij,jk->ik", scorch.to_sparse(x, "csr"), X)
    assert torch.equal(got, torch.zeros(50, 24, dtype=dtype))
    got = scorch.einsum("ij,j->i", scorch.to_sparse(x, "csr"), X[:, 0])
    assert torch.equal(got, torch.zeros(50, dtype=dtype))


@pytest.mark.parametrize("dtype", DT)
def test_parallel_threshold_by_work(dtype):
    """Rows run on all threads only when the work (stored entries plus rows, times the
    dense extents inside) pays for waking them; both sides of the threshold are right."""
    g = torch.Generator().manual_seed(7)
    for n, per_row, k in [(300, 3, 1), (3000, 20, 1), (300, 3, 64)]:
        cols = torch.randint(0, n, (n * per_row,), generator=g)
        rows = torch.arange(n).repeat_interleave(per_row)
        rows[: n * per_row // 3] = 0            # a heavy first row: the split must balance
        x = torch.zeros(n, n, dtype=dtype).index_put_((rows, cols), torch.ones(n * per_row,
                                                      dtype=dtype), accumulate=True)
        A = scorch.to_sparse(x, "csr")
        X = torch.rand(n, k, dtype=dtype, generator=g)
        if k == 1:
            torch.testing.assert_close(scorch.einsum("ij,j->i", A, X[:, 0]), x @ X[:, 0],
                                       **tol(dtype))
        torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), x @ X, **tol(dtype))
    U = scorch.to_sparse(make_dense((300, 300), dtype, 11, density=0.05), "csr",
                         index_dtype=torch.int64)          # a kernel of its own
    text = scorch.explain("ij,jk->ik", U, X)
    lines = [l for l in text.splitlines() if "omp parallel" in l]
    assert lines and "if(sc_k_par_worth(" in lines[0] and "* (Nk_" in lines[0], lines
    assert "return n >= 2 && work >= 8192;" in text


def test_partial_tiles_without_avx512(tmp_path):
    """The partial vector tile's masked moves have a lane-by-lane form for compilers
    targeting no AVX-512; a fresh process compiles the kernels that way."""
    import os
    import subprocess
    import sys
    code = (
        "import torch, scorch\n"
        "g = torch.Generator().manual_seed(4)\n"
        "for dt in (torch.float32, torch.float64):\n"
        "    x = torch.rand(9, 6, generator=g, dtype=dt) * (torch.rand(9, 6, generator=g) < .5)\n"
        "    A = scorch.to_sparse(x, 'csr')\n"
        "    for k in (1, 5, 7, 17, 20):\n"
        "        X = torch.rand(6, k, generator=g, dtype=dt)\n"
        "        torch.testing.assert_close(A @ X, x @ X)\n"
        "    assert 'sc_vloadn_' in scorch.explain(torch.mm, A, X)\n"
        "print('ok')\n")
    env = dict(os.environ, SCORCH_CACHE_DIR=str(tmp_path),
               SCORCH_CFLAGS="-O2 -march=native -mno-avx512f -fopenmp")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_scalar_sums_are_not_vectorized_again():
    """SpMV's row sums, already split over several accumulators, run as loops marked for the
    C compiler not to vectorize (gcc 12 would use gathers and an in-order lane reduction
    for float32: 1.5-2x slower); the vector tiles of SpMM are left alone."""
    x = rows_of_every_length(40, 30, torch.float32, 5)
    A = scorch.to_sparse(x, "csr")
    body = scorch.explain(torch.mv, A, torch.rand(30)).split("sc_rt_env *env)\n{")[-1]
    loops = body.splitlines()
    marked = [loops[i + 1].strip() for i, l in enumerate(loops) if l.strip() == "SC_NOVEC"]
    # one row: the four-accumulator loop and its rest; a pair of rows (test_spmv_pairs):
    # the jammed loop and each row's rest, or each row's two loops
    assert len(marked) == 2 + 3 + 4 and all(m.startswith("for (") for m in marked), marked
    assert body.count("SC_NOVEC_BODY") == len(marked)
    tiles = scorch.explain(torch.mm, A, torch.rand(30, 16)).split("sc_rt_env *env)\n{")[-1]
    assert "SC_NOVEC_BODY" not in tiles
