"""Kernels written for either vector width.  The compiler writes its vectors 64 bytes wide
where the CPU has AVX-512F and 32 bytes wide elsewhere; SCORCH_VEC_BYTES picks one.  The
rest of the suite runs at this machine's width; here every vector code path (SpMM register
tiles of every width class, SDDMM dot-product groups and their remainders, SpMV, SpGEMM,
the masked first-n-lane moves) runs at both widths in a child process, against dense."""
import os
import subprocess
import sys
import textwrap

import pytest

SWEEP = textwrap.dedent("""
    import torch, scorch
    torch.manual_seed(0)
    want = int(sys.argv[1])
    n = 0
    for dt, tol in ((torch.float32, 1e-4), (torch.float64, 1e-10)):
        x = torch.zeros(37, 29, dtype=dt)
        for r in range(37):                      # row r has r % 19 entries
            x[r, torch.randperm(29)[: r % 19]] = torch.rand(r % 19, dtype=dt) + 0.5
        A = scorch.to_sparse(x, "csr")
        for k in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 65, 100):
            X = torch.rand(29, k, dtype=dt)
            torch.testing.assert_close(A @ X, x @ X, rtol=tol, atol=tol)
            U, V = torch.rand(37, k, dtype=dt), torch.rand(29, k, dtype=dt)
            S = torch.einsum("ij,ik,jk->ij", A, U, V)
            torch.testing.assert_close(S.to_dense(), x * (U @ V.T), rtol=tol, atol=tol)
            n += 2
        v = torch.rand(29, dtype=dt)
        torch.testing.assert_close(torch.mv(A, v), x @ v, rtol=tol, atol=tol)
        y = x[:29, :]
        B = scorch.to_sparse(y, "csr")
        torch.testing.assert_close((B @ B).to_dense(), y @ y, rtol=tol, atol=tol)
        n += 2
    text = scorch.explain("ij,jk->ik", A, torch.rand(29, 16, dtype=torch.float64))
    assert f"vectors: {want} bytes" in text, text[:400]
    assert f"vector_size({want})" in text
    print("checked", n)
""")


def run(env_bytes):
    env = dict(os.environ, SCORCH_VEC_BYTES=env_bytes)
    return subprocess.run([sys.executable, "-c", "import sys\n" + SWEEP, env_bytes],
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("width", ["32", "64"])
def test_kernels_at_each_vector_width(width):
    r = run(width)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "checked 72" in r.stdout


def test_unknown_vector_width_is_refused_by_name():
    r = run("48")
    assert r.returncode != 0
    assert "SCORCH_VEC_BYTES must be 32 or 64, not '48'" in r.stderr
    assert "ValueError" in r.stderr
