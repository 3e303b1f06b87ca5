"""SpMV's rows read through 8-lane gathers (lower/build.c gathered_row) where the CPU's
gathers are fast: the compiler times them once (driver/probe.c), SCORCH_GATHERS=0/1
overrides it.  The rest of the suite runs with SCORCH_GATHERS=0 (conftest), so these tests
run the gathered rows in child processes: rows of every length around the cuts (8, 16,
16 + 8), x on both sides of the prefetch gate (1 MiB), the rows' own entries requested
ahead, 32- and 64-bit coordinates, float and integer values, 1 and 2 threads, products with literals and per-row factors, against dense; a long row and a
short row last in the arrays under AddressSanitizer; the gathers' lane-by-lane fallbacks
(kernels compiled without -march=native)."""
import os
import subprocess
import sys

import pytest

from conftest import run_code, sanitized_env

CODE = r"""
import re, sys, torch, scorch
g = torch.Generator().manual_seed(0)
want = sys.argv[1] == "1"

def matrix(dt, n):
    # rows of every length 0..40 and a few long ones, shuffled; a row of 37 last (its
    # masked tail ends the arrays)
    lens = torch.cat([torch.arange(41), torch.tensor([0, 64, 65, 100, 3])])
    lens = torch.cat([lens[torch.randperm(len(lens), generator=g)], torch.tensor([37])])
    r = torch.repeat_interleave(torch.arange(len(lens)), lens)
    c = torch.cat([torch.randperm(n, generator=g)[:k] for k in lens.tolist()])
    d = torch.zeros(len(lens), n, dtype=dt)
    if dt.is_floating_point:
        d[r, c] = torch.rand(len(r), dtype=dt, generator=g) + 0.5
    else:
        d[r, c] = torch.randint(-9, 10, (len(r),), dtype=dt, generator=g)
    return d

TAGS = {torch.float32: "f32h", torch.float64: "f64", torch.int32: "u32h", torch.int64: "u64"}
for dt, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12), (torch.int32, 0), (torch.int64, 0)):
    for n in (1000, 262144):          # x below / at the prefetch gate (1 MiB of float32)
        d = matrix(dt, n)
        if dt.is_floating_point:
            x = torch.rand(n, dtype=dt, generator=g) - 0.5
            ref = (d.double() @ x.double()).to(dt)
        else:
            x = torch.randint(-9, 10, (n,), dtype=dt, generator=g)
            ref = d @ x
        # (integer values: 32-bit coordinates only, the ones that gather)
        for it in (torch.int32, torch.int64) if dt.is_floating_point else (torch.int32,):
            A = scorch.to_sparse(d, "csr", index_dtype=it)
            text = scorch.explain(torch.mv, A, x)
            fast = re.search(r"^gathers: (\w+)", text, re.M).group(1)
            assert fast == ("fast" if want else "slow"), fast
            vec64 = re.search(r"^vectors: 64 bytes", text, re.M) is not None
            tag = TAGS[dt]    # 8 lanes a gather
            gathered = "+= 16)" in text and f"sc_vgathern_{tag}(B_vals" in text
            assert gathered == (want and vec64 and it == torch.int32), text[-2000:]
            if gathered:
                assert ("__builtin_prefetch" in text)
                # the row's own crd and vals 256 entries on, at its start and each step
                for at in ("pb", "pu"):
                    for arr in ("A1_crd_1", "A_vals_3"):
                        assert f"__builtin_prefetch(&{arr}[sc_min(({at}_" in text, (at, arr)
                assert text.count(" + 256), (A1_len_2 - 1))]);") == 4
                # a step of 16 float64 values spans two lines: both requested
                second = 2 if dt.itemsize == 8 else 0
                assert text.count("&A_vals_3[sc_min((") == 2 + second
                assert text.count(" + 264), (A1_len_2 - 1))]);") == second
            for th in (1, 2):
                torch.set_num_threads(th)
                torch.testing.assert_close(A @ x, ref, rtol=tol, atol=tol)
                torch.testing.assert_close(torch.mv(A, x), ref, rtol=tol, atol=tol)
                k = scorch.kernel("y(i) = -2 * A(i,j) * x(j)", A="csr", x="dense")
                torch.testing.assert_close(k(A, x), -2 * ref, rtol=tol, atol=tol)
                rows = d.shape[0]
                torch.testing.assert_close(scorch.einsum("i,ij,j->i", x[:rows], A, x),
                                           x[:rows] * ref, rtol=tol, atol=tol)

# an inf or nan in x reaches only the rows that read it: masked lanes read nothing
for n in (64, 262144):
    d = torch.zeros(4, n)
    d[0, :20] = 1.0            # a long row
    d[1, [5, 6]] = 2.0
    d[2, 30:55] = 1.0          # reads the inf
    x = torch.ones(n)
    x[30] = float("inf")
    x[60] = float("nan")
    y = scorch.to_sparse(d, "csr") @ x
    assert y[0] == 20.0 and y[1] == 4.0 and y[2] == float("inf") and y[3] == 0.0, y
# a short row last in the arrays: its one masked gather ends crd and vals, and must not
# read past them
for dt in (torch.float32, torch.float64):
    d = torch.zeros(3, 1000, dtype=dt)
    d[0, :20] = 1.0
    d[2, 3] = 1.0
    x = torch.rand(1000, dtype=dt, generator=g)
    A = scorch.to_sparse(d, "csr")
    for th in (1, 2):
        torch.set_num_threads(th)
        torch.testing.assert_close(A @ x, d @ x)
# empty, 1x1, all-zero
for d in (torch.zeros(0, 5), torch.ones(1, 1), torch.zeros(3, 40)):
    x = torch.rand(d.shape[1])
    torch.testing.assert_close(scorch.to_sparse(d, "csr") @ x, d @ x)
print("ok")
"""


@pytest.mark.parametrize("gathers", ["1", "0"])
def test_rows_against_dense(gathers, tmp_path):
    code = f"import sys\nsys.argv[1:] = [{gathers!r}]\n" + CODE
    run_code(code, tmp_path, SCORCH_GATHERS=gathers)


def test_without_avx512vl(tmp_path):
    """Kernels compiled without -march=native: the gathers' lane-by-lane fallbacks."""
    run_code("import sys\nsys.argv[1:] = ['1']\n" + CODE, tmp_path, SCORCH_GATHERS="1",
             SCORCH_CFLAGS="-O2 -fopenmp")


@pytest.mark.skipif(sanitized_env() is None, reason="gcc's sanitizer runtimes are not installed")
def test_under_asan(tmp_path):
    """Kernels compiled with -fsanitize=address,undefined: a masked tail reading past a
    row (the last row's, past the arrays) is reported."""
    run_code("import sys\nsys.argv[1:] = ['1']\n" + CODE, tmp_path, SCORCH_GATHERS="1",
             **sanitized_env())


def test_measured_when_unset(tmp_path):
    """Without SCORCH_GATHERS the compiler measures: explain says fast or slow, and the
    kernels are right either way."""
    env = {k: v for k, v in os.environ.items() if k != "SCORCH_GATHERS"}
    env["SCORCH_CACHE_DIR"] = str(tmp_path)
    code = ("import torch, scorch\n"
            "d = torch.rand(50, 300); d[d < 0.7] = 0; x = torch.rand(300)\n"
            "A = scorch.to_sparse(d, 'csr')\n"
            "line = [l for l in scorch.explain(torch.mv, A, x).splitlines() if l.startswith('gathers:')]\n"
            "assert line in (['gathers: fast'], ['gathers: slow']), line\n"
            "torch.testing.assert_close(A @ x, d @ x)\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_unknown_setting_is_refused_by_name():
    env = dict(os.environ, SCORCH_GATHERS="yes")
    code = "import torch, scorch\nscorch.to_sparse(torch.eye(3), 'csr') @ torch.ones(3)\n"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode != 0
    assert "SCORCH_GATHERS must be 0 or 1, not 'yes'" in r.stderr
    assert "ValueError" in r.stderr
