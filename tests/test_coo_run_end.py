"""The end of a run of equal coordinates at a non-unique level (COO's rows, its repeated
(row, column) pairs) is found by a doubling-then-halving search over the ordered
coordinates (IR RUNEND, the kernel prelude's sc_k_runend32/64), not a scan of one entry
at a time.  Checked against dense on runs of every length around the search's step
boundaries (0-70, 127-129, a last run reaching the level's end), with duplicates, for
the three places a run ends: the whole-pattern SDDMM (one iterator), an intersection
(iterators known to be live) and a union of three (where an exhausted iterator's run is
not searched), int32 and int64 coordinates, f32 and f64, and under AddressSanitizer +
UBSan (no read past the range searched)."""
import torch

from conftest import run_combos, run_combos_sanitized

CODE = r'''
import torch, scorch

def coo(rows, cols, lens, dup, dt, it, g):
    """COO with row r holding lens[r] entries at increasing columns; every dup-th entry
    repeated once (split value), so (row, column) pairs repeat too."""
    r, c, v = [], [], []
    for i, n in enumerate(lens):
        cs = torch.randperm(cols, generator=g)[:n].sort().values
        for j in cs.tolist():
            x = float(torch.rand(1, generator=g, dtype=dt)) + 0.5
            if dup and len(v) % dup == 0:
                r += [i, i]; c += [j, j]; v += [x * 0.25, x * 0.75]
            else:
                r.append(i); c.append(j); v.append(x)
    A = scorch.from_components((rows, cols), "coo",
                               pos=[torch.tensor([0, len(v)], dtype=it), None],
                               crd=[torch.tensor(r, dtype=it), torch.tensor(c, dtype=it)],
                               values=torch.tensor(v, dtype=dt))
    d = torch.zeros(rows, cols, dtype=dt)
    d.index_put_((torch.tensor(r, dtype=torch.long), torch.tensor(c, dtype=torch.long)),
                 torch.tensor(v, dtype=dt), accumulate=True)
    return A, d

def check(dt, it):
    g = torch.Generator().manual_seed(11)
    tol = dict(rtol=1e-4, atol=1e-4) if dt == torch.float32 else {}
    lens = list(range(71)) + [127, 128, 0, 129, 1, 2, 3, 4, 200]
    cols = 260
    for dup in (0, 3):
        A, a = coo(len(lens), cols, lens, dup, dt, it, g)
        U = torch.rand(len(lens), 16, dtype=dt, generator=g)
        V = torch.rand(cols, 16, dtype=dt, generator=g)
        S = scorch.einsum("ij,ik,jk->ij", A, U, V)
        torch.testing.assert_close(S.to_dense(), a * (U @ V.T), **tol)
        text = scorch.explain("ij,ik,jk->ij", A, U, V)
        assert "sc_k_runend" in text.split("generated C", 1)[1].split("SC_K_RUNEND(sc_k_runend64", 1)[1]
        B, b = coo(len(lens), cols, lens[::-1], dup, dt, it, g)
        C, c = coo(len(lens), cols, lens[1:] + lens[:1], 0, dt, it, g)
        torch.testing.assert_close(scorch.einsum("ij,ij->ij", A, B).to_dense(), a * b, **tol)
        k = scorch.kernel("X(i,j) = A(i,j) + B(i,j) + C(i,j)", A="coo", B="coo", C="coo")
        torch.testing.assert_close(k(A, B, C).to_dense(), a + b + c, **tol)
        # a single row: the first run is the whole level
        R, r = coo(1, cols, [cols], dup, dt, it, g)
        torch.testing.assert_close(scorch.einsum("ij,ik,jk->ij", R, U[:1], V).to_dense(),
                                   r * (U[:1] @ V.T), **tol)

for dt, it in COMBOS:
    check(dt, it)
print("ok")
'''

def test_run_ends_against_dense(tmp_path):
    run_combos(CODE, tmp_path)


def test_run_ends_sanitized(tmp_path):
    run_combos_sanitized(CODE, tmp_path)
