"""SpMV's gather prefetch (lower/build.c prefetch_gather): where x outgrows a core's L2
(1 MiB, tested at run time), every unrolled step prefetches x at the coordinate 32
entries on, read from crd within its length.  Correct on both sides of the size gate,
and the coordinate read stays inside crd (a kernel built with AddressSanitizer)."""
import pytest
import torch

import scorch
from conftest import run_code, sanitized_env

CODE = r"""
import torch, scorch
g = torch.Generator().manual_seed(0)
for dt, n in ((torch.float32, 262_143), (torch.float32, 262_144), (torch.float64, 131_072),
              (torch.float32, 300_001)):
    rows = 41
    lens = torch.randint(0, 60, (rows,), generator=g)
    lens[-1] = 9      # the last row: an unrolled step within 32 entries of crd's end
    r = torch.repeat_interleave(torch.arange(rows), lens)
    c = torch.randint(0, n, (int(lens.sum()),), generator=g)
    d = torch.zeros(rows, n, dtype=dt)
    d[r, c] = torch.rand(len(r), dtype=dt, generator=g)
    x = torch.rand(n, dtype=dt, generator=g)
    for index_dtype in (torch.int32, torch.int64):
        A = scorch.to_sparse(d, "csr", index_dtype=index_dtype)
        assert "__builtin_prefetch" in scorch.explain(torch.mv, A, x)
        for th in (1, 2):
            torch.set_num_threads(th)
            torch.testing.assert_close(A @ x, d @ x)
            torch.testing.assert_close(scorch.einsum("i,ij,j->i", x[:rows], A, x), x[:rows] * (d @ x))
print("ok")
"""


def test_gather_prefetch_against_dense(tmp_path):
    run_code(CODE, tmp_path)


@pytest.mark.skipif(sanitized_env() is None, reason="gcc's sanitizer runtimes are not installed")
def test_gather_prefetch_under_asan(tmp_path):
    """Kernels compiled with -fsanitize=address,undefined, the runtimes preloaded: reading
    crd past its end (the clamp removed) fails here with a heap-buffer-overflow."""
    run_code(CODE, tmp_path, **sanitized_env())
