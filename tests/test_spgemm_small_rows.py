"""SpGEMM rows of at most 8 multiply-adds (fewer than the output's columns) skip the
Gustavson workspace: each product is appended, coordinate and value, to the row's slot
in the output, and the slot is sorted with equal coordinates summed (IR SORTSUM: by
insertion, or, for int32 coordinates and 32-bit values where the target has AVX-512, in
vector registers by sc_k_sortsum8_32_*).  Checked against dense, with the output's rows
ordered and free of repeats: rows of 0-12 products (both sides of the threshold), products landing
on one column, on distinct columns and mixed, rows whose product count reaches the
column count (which must keep the workspace: the slot is only that large), empty and
1x1 operands, a full output whose last row's products outnumber its slot, f32 and f64, int32 and int64 indices, one and two threads, and under
AddressSanitizer + UBSan (no write past a row's slot)."""
import torch

from conftest import CHECK_CSR, run_combos, run_combos_sanitized

CODE = r'''
import torch, scorch
''' + CHECK_CSR + r'''

def rows_of_products(cols, dt, g):
    """A (n x m) and B (m x cols) whose product's row r has exactly r % 13 products:
    row r of A holds r % 13 ones spread over rows of B with one entry each, those
    entries placed on one column (r % 3 == 0), on distinct columns (r % 3 == 1), or on
    two columns (r % 3 == 2)."""
    n, m = 40, 13 * 40
    a = torch.zeros(n, m, dtype=dt)
    b = torch.zeros(m, cols, dtype=dt)
    for r in range(n):
        k = r % 13
        for t in range(k):
            j = 13 * r + t
            a[r, j] = float(torch.randint(1, 5, (1,), generator=g))
            c = (r * 7) % cols if r % 3 == 0 else (r + 5 * t) % cols if r % 3 == 1 else (r + t % 2) % cols
            b[j, c] = float(torch.randint(1, 5, (1,), generator=g)) * (-1) ** t
    return a, b

for dt, it in COMBOS:
    tol = dict(rtol=1e-5, atol=1e-5) if dt == torch.float32 else {}
    g = torch.Generator().manual_seed(5)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for cols in (200, 9, 4, 1):
            a, b = rows_of_products(cols, dt, g)
            A = scorch.to_sparse(a, "csr", index_dtype=it)
            B = scorch.to_sparse(b, "csr", index_dtype=it)
            check(scorch.einsum("ij,jk->ik", A, B), a @ b, tol)
            check(A @ B, a @ b, tol)
        # every row's slot exactly full (4 products on 4 columns) but the last: 12
        # products on 4 columns, whose slot (4) is smaller than its products, at the
        # very end of the output's arrays (the sanitized run sees a write past them)
        a = torch.zeros(30, 30 * 4 + 12, dtype=dt)
        b = torch.zeros(30 * 4 + 12, 4, dtype=dt)
        for r in range(29):
            for t in range(4):
                a[r, 4 * r + t] = t + 1.0
                b[4 * r + t, t] = 2.0
        for t in range(12):
            a[29, 116 + t] = 1.0
            b[116 + t, t % 4] = t + 1.0
        A = scorch.to_sparse(a, "csr", index_dtype=it)
        B = scorch.to_sparse(b, "csr", index_dtype=it)
        assert "sc_k_sortsum" in scorch.explain("ij,jk->ik", A, B).split("SC_K_SORTSUM(sc_k_sortsum64_f64")[1]
        check(scorch.einsum("ij,jk->ik", A, B), a @ b, tol)
        # a random power-law-ish graph: short rows around the threshold, products meeting
        d = (torch.rand(300, 300, generator=g) < 0.012).to(dt) * torch.rand(300, 300, generator=g, dtype=dt)
        D = scorch.to_sparse(d, "csr", index_dtype=it)
        check(scorch.einsum("ij,jk->ik", D, D), d @ d, tol)
        for shape in ((0, 0), (1, 1), (3, 0)):
            e = torch.ones(shape, dtype=dt)
            E = scorch.to_sparse(e, "csr", index_dtype=it)
            F = scorch.to_sparse(torch.ones(shape[::-1], dtype=dt), "csr", index_dtype=it)
            check(scorch.einsum("ij,jk->ik", E, F), e @ torch.ones(shape[::-1], dtype=dt), tol)
print("ok")
'''

def test_small_rows_against_dense(tmp_path):
    run_combos(CODE, tmp_path)


def test_small_rows_sanitized(tmp_path):
    run_combos_sanitized(CODE, tmp_path)


def test_kernel_has_the_small_row_path():
    """The generated C takes rows of at most 8 products (and fewer than the columns)
    through SORTSUM: with int32 coordinates the helper for at most 8 entries (vector
    registers where the target has AVX-512 and the values are 32 bits), with int64 ones
    the insertion sort."""
    import scorch
    for it, call in ((torch.int32, "= sc_k_sortsum8_32_f32(out_crd_"),
                     (torch.int64, "= sc_k_sortsum64_f32(out_crd_")):
        A = scorch.to_sparse(torch.eye(20), "csr", index_dtype=it)
        src = scorch.explain("ij,jk->ik", A, A)
        assert "<= 8) && (bnd_" in src and call in src
        assert "SC_K_SORTSUMV(sc_k_sortsumv_32_f32, float," in src


def test_one_column_product_stores_only_the_structural_pattern():
    """A·B with one column in B: the order i,k,j (one dot product per (i, k)) stored an
    entry in every row of A, zero where the row meets no entry of B's column; the
    scheduler now weighs an index of extent 1 under other loops as it weighs any
    densified sparse output.  Sparse operands in several formats, one and 3 columns."""
    import scorch
    g = torch.Generator().manual_seed(7)
    x = torch.zeros(40, 30)
    x[torch.randint(0, 40, (60,), generator=g), torch.randint(0, 30, (60,), generator=g)] = 1.5
    for cols in (1, 3):
        y = torch.zeros(30, cols)
        y[torch.tensor([2, 17]), 0] = 2.0
        for fa, fb in (("csr", "csr"), ("dcsr", "csr"), ("coo", "coo"), ("csr", "dcsr")):
            C = scorch.to_sparse(x, fa) @ scorch.to_sparse(y, fb)
            ref = x @ y
            assert isinstance(C, scorch.SparseTensor)
            torch.testing.assert_close(C.to_dense(), ref)
            assert C.nnz == int(torch.count_nonzero(ref)), (fa, fb, cols, C.nnz)


REDUCTION_BELOW = r'''
import torch, scorch
for dt, it in COMBOS:
    A = torch.tensor([[1., 2, 0], [0, 0, 3]], dtype=dt)
    B = torch.tensor([[1., 0, 0, 2], [0, 1, 0, 0], [0, 0, 1, 1]], dtype=dt)
    v = torch.ones(3, dtype=dt)
    for vf in ("csf", "coo", None):
        ops = [scorch.to_sparse(A, "csr", index_dtype=it), scorch.to_sparse(B, "csr", index_dtype=it),
               scorch.to_sparse(v, vf, index_dtype=it) if vf else v]
        r = scorch.einsum("ij,jk,l->ik", *ops, out_format="csr")
        assert r.nnz == 5 and torch.equal(r.to_dense(), torch.einsum("ij,jk,l->ik", A, B, v)), vf
    X = torch.zeros(2, 1, 4, dtype=dt)
    X[0, 0] = torch.tensor([1., 2, 3, 4], dtype=dt)
    w = torch.ones(5000, dtype=dt)
    for of in ("csr", "csc"):
        r = scorch.einsum("l,kij->jk", scorch.to_sparse(w, "csf", index_dtype=it),
                          scorch.to_sparse(X, "csf", index_dtype=it), out_format=of,
                          schedule="order(j,i,k,l) parallel(j) workspace(k)" if of == "csr" else None)
        assert torch.equal(r.to_dense(), torch.einsum("l,kij->jk", w, X)), of
print("ok")
'''


def test_reduction_below_the_last_output_index(tmp_path):
    """A reduction loop below the output's last index ("ij,jk,l->ik" in order i,j,k,l)
    must not take the one-pass fill, which appends each product once per iteration of
    that loop: it overran the row's slot (heap corruption, wrong values); the two-phase
    fill runs there now.  In a child process, so that a regression aborts only it."""
    run_combos(REDUCTION_BELOW, tmp_path)


def test_reduction_below_the_last_output_index_sanitized(tmp_path):
    run_combos_sanitized(REDUCTION_BELOW, tmp_path)
