"""scorch.einsum against torch.einsum on the dense tensors: every case of the compiler
issue, float32 and float64, int32 and int64 indices, seeded inputs with empty rows."""
import importlib.util
import threading

import numpy as np
import pytest
import torch

import scorch
from conftest import make_dense, run_code, seed_of

DT = [torch.float32, torch.float64]
IT = [torch.int32, torch.int64]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12,
                                                                           atol=1e-10)


def dense_of(x):
    return x.to_dense() if isinstance(x, scorch.SparseTensor) else x


def check(expr, *ops, out_format=None, schedule=None, expect_sparse=None):
    got = scorch.einsum(expr, *ops, out_format=out_format, schedule=schedule)
    ref = torch.einsum(expr, *[dense_of(o) for o in ops])
    if expect_sparse is not None:
        assert isinstance(got, scorch.SparseTensor) == expect_sparse, type(got)
    g = dense_of(got)
    assert g.shape == ref.shape
    torch.testing.assert_close(g, ref, **tol(ref.dtype))
    return got


def sp(shape, fmt, dtype, it, seed, kind="random"):
    return scorch.to_sparse(make_dense(shape, dtype, seed, kind), fmt, index_dtype=it)


def dn(shape, dtype, seed, colmajor=False):
    x = make_dense(shape, dtype, seed, "full")
    return x.t().contiguous().t() if colmajor else x


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_spmv(fmt, it, dtype):
    s = seed_of("spmv", fmt, it, dtype)
    check("ij,j->i", sp((9, 7), fmt, dtype, it, s, "empty_rows"), dn((7,), dtype, s + 1))


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
@pytest.mark.parametrize("colmajor", [False, True])
def test_spmm(fmt, it, dtype, colmajor):
    s = seed_of("spmm", fmt, it, dtype, colmajor)
    A = sp((9, 7), fmt, dtype, it, s, "empty_rows")
    check("ij,jk->ik", A, dn((7, 5), dtype, s + 1, colmajor), expect_sparse=False)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_dense_times_sparse(fmt, dtype):
    s = seed_of("dxs", fmt, dtype)
    check("ij,jk->ik", dn((4, 7), dtype, s), sp((7, 6), fmt, dtype, torch.int32, s + 1))


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("it", IT)
@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsr"])
def test_sddmm_keeps_pattern(fmt, it, dtype):
    s = seed_of("sddmm", fmt, it, dtype)
    A = sp((8, 6), fmt, dtype, it, s, "empty_rows")
    got = check("ij,ik,jk->ij", A, dn((8, 4), dtype, s + 1), dn((6, 4), dtype, s + 2),
                expect_sparse=True)
    assert got.format == A.format
    assert torch.equal(got.indices(1)[1], A.indices(1)[1])


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fa", ["csr", "csc", "dcsr"])
@pytest.mark.parametrize("fb", ["csr", "csc", "dcsr"])
@pytest.mark.parametrize("fo", [None, "csr", "dcsr", "dense"])
def test_spgemm(fa, fb, fo, dtype):
    s = seed_of("spgemm", fa, fb, fo, dtype)
    A = sp((8, 9), fa, dtype, torch.int32, s, "empty_rows")
    B = sp((9, 7), fb, dtype, torch.int32, s + 1)
    got = check("ij,jk->ik", A, B, out_format=fo)
    if fo is None and fa == fb == "csr":
        assert isinstance(got, scorch.SparseTensor) and got.format.name == "csr"
    if fo in ("csr", "dcsr"):
        assert got.format.name == fo


def test_a_times_a_transposed():
    A = sp((7, 9), "csr", torch.float64, torch.int32, seed_of("aat"))
    check("ij,kj->ik", A, A)


@pytest.mark.parametrize("it", [torch.int32, torch.int64])
def test_transposed_operand_converted_once_until_its_values_change(it):
    from scorch import _compiler

    s = seed_of("pretranspose", it)
    A = sp((6, 6), "csr", torch.float64, it, s)
    B = sp((6, 6), "csr", torch.float64, it, s + 1)
    assert "transposed before running" in scorch.explain("ij,ji->ij", A, B)  # as compiled
    a, b = A.to_dense(), B.to_dense()
    got = check("ij,ji->ij", A, B)
    assert isinstance(got, scorch.SparseTensor) and got.format.name == "csr"
    (fmt, (_, copy, _)), = B._transposed.items()                # B, converted once
    assert fmt.name == "csc" and copy.index_dtype == it
    compiles = _compiler._C.jit_stats()["compiles"] + _compiler._C.jit_stats()["disk_hits"]
    torch.testing.assert_close(dense_of(scorch.einsum("ij,ji->ij", A, B)), a * b.t())
    assert B._transposed[fmt][1] is copy                     # warm: the same copy, no kernel
    assert (_compiler._C.jit_stats()["compiles"] + _compiler._C.jit_stats()["disk_hits"]
            == compiles)
    B.values().mul_(2)                                       # in place: a new version
    torch.testing.assert_close(dense_of(scorch.einsum("ij,ji->ij", A, B)), 2 * a * b.t())
    assert B._transposed[fmt][1] is not copy
    assert A._transposed is None and torch.equal(B.to_dense(), 2 * b)   # B's own arrays


def _generated(text):
    return [line for line in text.splitlines() if line.startswith("generated C (")]


@pytest.mark.parametrize("how", ["einsum", "kernel"])
def test_explain_shows_the_kernel_the_call_runs(how):
    """A discordant operand is transposed once and the kernel compiled for the copy runs:
    explain shows that kernel (its C and schedule), and says where the operand went."""
    from scorch import _compiler

    s = seed_of("explain-run", how)
    A = sp((7, 5), "csr", torch.float32, torch.int32, s)
    B = sp((6, 5), "csr", torch.float32, torch.int32, s + 1)
    lang, expr = _compiler._LANG_EINSUM, "ij,kj->ik"
    if how == "einsum":
        text = scorch.explain(expr, A, B)
    else:
        lang, expr = _compiler._LANG_INDEX, "C(i,k) = A(i,j) * B(k,j)"
        text = scorch.kernel(expr, A="csr", B="csr").explain(A, B)
    asked = _compiler._compile(lang, expr, (A, B), None, None, False)[0]
    ran = _compiler._compile(lang, expr, (A, B), None, None)[0]
    assert ran is not asked                                  # the case this is about
    info = lambda e: _compiler._C.kernel_info(e[0])[5]      # noqa: E731
    assert _generated(text) == _generated(info(ran)) != _generated(info(asked))
    lines = text.splitlines()
    b = next(i for i, line in enumerate(lines) if line.startswith("operand B:"))
    given = _compiler._with_counts(info(asked), (A, B))     # (counts: these operands')
    assert lines[b] == [x for x in given.splitlines() if x.startswith("operand B:")][0]
    assert lines[b + 1].startswith("  transposed before running to csc")
    assert "once: the copy is kept on the tensor" in lines[b + 1]
    assert [x for x in lines if x.startswith("operand B:")] == [lines[b]]
    for field in ("loop order:", "schedule:", "output "):
        assert ([x for x in lines if x.startswith(field)] ==
                [x for x in info(ran).splitlines() if x.startswith(field)])
    torch.testing.assert_close(dense_of(scorch.einsum("ij,kj->ik", A, B)),
                               A.to_dense() @ B.to_dense().t())


@pytest.mark.parametrize("fa,fb", [("csr", "csr"), ("csr", "coo"), ("csc", "dcsr"),
                                   ("coo", "csr")])
@pytest.mark.parametrize("dtype", DT)
def test_elementwise(fa, fb, dtype):
    s = seed_of("ew", fa, fb, dtype)
    A = sp((6, 8), fa, dtype, torch.int32, s, "empty_rows")
    B = sp((6, 8), fb, dtype, torch.int64, s + 1)
    check("ij,ij->ij", A, B)
    D = A.to_dense(), B.to_dense()
    for text, ref in [("C(i,j) = A(i,j) + B(i,j)", D[0] + D[1]),
                      ("C(i,j) = A(i,j) - B(i,j)", D[0] - D[1])]:
        got = scorch.kernel(text)(A, B)
        torch.testing.assert_close(dense_of(got), ref, **tol(dtype))


def test_scaled_sum():
    s = seed_of("scaled")
    A = sp((5, 6), "csr", torch.float64, torch.int32, s)
    B = sp((5, 6), "csc", torch.float64, torch.int32, s + 1)
    C = sp((5, 6), "coo", torch.float64, torch.int32, s + 2)
    got = scorch.kernel("D(i,j) = 2 * A(i,j) + B(i,j) * C(i,j)")(A, B, C)
    ref = 2 * A.to_dense() + B.to_dense() * C.to_dense()
    torch.testing.assert_close(dense_of(got), ref)


@pytest.mark.parametrize("expr", ["ij->i", "ij->j", "ij->", "ij->ji"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_reductions_and_transpose(expr, fmt):
    A = sp((6, 5), fmt, torch.float64, torch.int32, seed_of(expr, fmt), "empty_rows")
    check(expr, A)


def test_outer_and_inner():
    s = seed_of("outer")
    x = scorch.to_sparse(make_dense((6,), torch.float64, s), "csf")
    check("i,j->ij", x, dn((4,), torch.float64, s + 1))
    A = sp((5, 6), "csr", torch.float64, torch.int32, s + 2)
    check("ij,ij->", A, dn((5, 6), torch.float64, s + 3))


@pytest.mark.parametrize("expr,shapes", [
    ("ijk,k->ij", [(4, 5, 6), (6,)]),
    ("ijk,kl->ijl", [(4, 5, 6), (6, 3)]),
    ("ijk,jr,kr->ir", [(4, 5, 6), (5, 3), (6, 3)]),
    ("ijk,ijk->ijk", [(4, 5, 6), (4, 5, 6)]),
])
@pytest.mark.parametrize("dtype", DT)
def test_csf_3d(expr, shapes, dtype):
    s = seed_of(expr, dtype)
    A = sp(shapes[0], "csf", dtype, torch.int32, s)
    rest = [dn(sh, dtype, s + i + 1) for i, sh in enumerate(shapes[1:])]
    if expr == "ijk,ijk->ijk":
        rest = [sp(shapes[1], "coo", dtype, torch.int32, s + 9)]
    check(expr, A, *rest)


def test_batched():
    s = seed_of("bmm")
    A = sp((3, 4, 5), "csf", torch.float64, torch.int32, s)
    check("bij,bjk->bik", A, dn((3, 5, 2), torch.float64, s + 1))


def test_chain_of_three():
    s = seed_of("chain")
    A = sp((5, 6), "csr", torch.float64, torch.int32, s)
    check("ij,jk,kl->il", A, dn((6, 4), torch.float64, s + 1), dn((4, 3), torch.float64,
                                                                   s + 2))


def test_empty_and_tiny():
    for shape in [(0, 4), (4, 0), (1, 1)]:
        A = sp(shape, "csr", torch.float64, torch.int32, 1, "full")
        check("ij,jk->ik", A, dn((shape[1], 3), torch.float64, 2))
        check("ij,j->i", A, dn((shape[1],), torch.float64, 3))


def test_kernel_reuse_and_explain():
    k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense")
    A = sp((6, 5), "csr", torch.float32, torch.int32, 11)
    X = dn((5, 3), torch.float32, 12)
    torch.testing.assert_close(k(A, X), A.to_dense() @ X)
    torch.testing.assert_close(k(A, 2 * X), A.to_dense() @ (2 * X))
    with pytest.raises(ValueError, match="declared csr"):
        k(A.to_format("csc"), X)
    text = scorch.explain(torch.mm, A, X)
    assert "csr" in text and "#include" in text


def test_threads_share_the_cache():
    errors = []

    def work(seed):
        try:
            for fmt in ("csr", "coo"):
                A = sp((7, 6), fmt, torch.float64, torch.int32, seed)
                check("ij,jk->ik", A, dn((6, 3), torch.float64, seed + 1))
                check("ij,ik,jk->ij", A, dn((7, 2), torch.float64, seed + 2),
                      dn((6, 2), torch.float64, seed + 3))
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(100 + i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("expr,err,match", [
    ("ij,jk>ik", ValueError, "column"),
    ("ij,jk->iz", ValueError, "z"),
    ("ijk,jk->ik", ValueError, "operand"),
])
def test_bad_expressions(expr, err, match):
    A = sp((3, 4), "csr", torch.float64, torch.int32, 1)
    with pytest.raises(err, match=match):
        scorch.einsum(expr, A, dn((4, 2), torch.float64, 2))


def test_shape_mismatch_names_the_index():
    A = sp((3, 4), "csr", torch.float64, torch.int32, 1)
    with pytest.raises(ValueError, match="j"):
        scorch.einsum("ij,jk->ik", A, dn((5, 2), torch.float64, 2))


@pytest.mark.parametrize("expr,fmts,schedules", [
    ("ij,jk->ik", ["csr", None], ["order(i,j,k) parallel(i)", "order(i,k,j)",
                                  "order(i,j,k) parallel(none)"]),
    ("ij,jk->ik", ["csr", "csr"], ["order(i,j,k) parallel(i) workspace(k)",
                                   "order(i,j,k) parallel(none) workspace(k)"]),
    ("ij,ik,jk->ij", ["csr", None, None], ["order(i,j,k)", "order(i,j,k) parallel(none)"]),
])
def test_forced_schedules_agree(expr, fmts, schedules):
    s = seed_of("sched", expr, tuple(fmts))
    shapes = {"ij,jk->ik": [(300, 40), (40, 5)], "ij,ik,jk->ij": [(300, 40), (300, 6),
                                                                 (40, 6)]}[expr]
    ops = [sp(sh, f, torch.float64, torch.int32, s + i) if f else
           dn(sh, torch.float64, s + i) for i, (sh, f) in enumerate(zip(shapes, fmts))]
    results = [dense_of(scorch.einsum(expr, *ops, schedule=scorch.Schedule(t)))
               for t in schedules]
    ref = torch.einsum(expr, *[dense_of(o) for o in ops])
    for t, r in zip(schedules, results):
        torch.testing.assert_close(r, ref, msg=lambda m, t=t: f"{t}: {m}")
        torch.testing.assert_close(r, results[0])


@pytest.mark.parametrize("text,match", [
    ("order(i,j)", "every index"),
    ("order(i,j,k) parallel(j)", "parallel"),
    ("bogus(i)", "unknown directive"),
])
def test_illegal_schedule_is_refused(text, match):
    A = sp((6, 5), "csr", torch.float64, torch.int32, 1)
    with pytest.raises(ValueError, match=match):
        scorch.einsum("ij,jk->ik", A, dn((5, 3), torch.float64, 2), schedule=text)


@pytest.mark.parametrize("bad", [3, ["order(i,j,k)"]])
def test_schedule_of_another_type_is_a_type_error(bad):
    A = sp((6, 5), "csr", torch.float64, torch.int32, 1)
    with pytest.raises(TypeError, match="a schedule is text, not"):
        scorch.einsum("ij,jk->ik", A, dn((5, 3), torch.float64, 2), schedule=bad)
    with pytest.raises(TypeError, match="a schedule is text, not"):   # at construction
        scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense", schedule=bad)
    k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense",
                      schedule=scorch.Schedule("order(i,j,k)"))
    torch.testing.assert_close(k(A, dn((5, 3), torch.float64, 2)),
                               A.to_dense() @ dn((5, 3), torch.float64, 2))


def test_second_process_reuses_the_disk_cache(tmp_path):
    import subprocess
    import sys

    code = (
        "import torch, scorch, scorch._C as C\n"
        "A = scorch.to_sparse(torch.eye(5, dtype=torch.float64) * 3, 'csr')\n"
        "y = scorch.einsum('ij,j->i', A, torch.arange(5.0, dtype=torch.float64))\n"
        "assert torch.equal(y, torch.arange(5.0, dtype=torch.float64) * 3)\n"
        "s = C.jit_stats(); print(s['compiles'], s['disk_hits'])\n")
    env = dict(__import__("os").environ, SCORCH_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = (tuple(map(int, r.stdout.split())) for r in runs)
    assert first[0] >= 1                      # the first process compiled
    assert second == (0, first[0])            # the second only loaded from disk


def test_a_kernel_file_cut_short_is_rebuilt(tmp_path):
    """A cached kernel whose file lost its end (a full disk, a copy cut short) is not
    loaded (dlopen would map pages past the end of the file: SIGBUS) but compiled again."""
    import glob
    import os
    import subprocess
    import sys

    code = (
        "import torch, scorch, scorch._C as C\n"
        "A = scorch.to_sparse(torch.eye(5, dtype=torch.float64) * 3, 'csr')\n"
        "y = scorch.einsum('ij,j->i', A, torch.arange(5.0, dtype=torch.float64))\n"
        "assert torch.equal(y, torch.arange(5.0, dtype=torch.float64) * 3)\n"
        "s = C.jit_stats(); print(s['compiles'], s['disk_hits'], s['disk_refused'])\n")
    env = dict(os.environ, SCORCH_CACHE_DIR=str(tmp_path))

    def run():
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
        return tuple(map(int, r.stdout.split()))

    compiles = run()[0]
    kernels = glob.glob(str(tmp_path / "*.so"))
    assert compiles >= 1 and len(kernels) == compiles
    for k in kernels:
        os.truncate(k, os.path.getsize(k) // 2)
    assert run() == (compiles, 0, compiles)  # each refused and compiled again
    assert all(os.path.getsize(k) > 0 for k in kernels)


@pytest.mark.parametrize("failing", [False, True], ids=["compiler", "false"])
def test_compiles_with_sigchld_ignored(failing, tmp_path):
    """A process that ignores SIGCHLD (as daemons do) loses its children's exit statuses
    (waitpid fails with ECHILD): kernels still compile, and a compiler that fails still
    gives a CompileError, judged by the library it did not write."""
    code = (
        "import signal, torch, scorch\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "A = scorch.to_sparse(torch.eye(5, dtype=torch.float64) * 3, 'csr')\n"
        "try:\n"
        "    y = scorch.einsum('ij,j->i', A, torch.arange(5.0, dtype=torch.float64))\n"
        "except scorch.CompileError as e:\n"
        "    assert FAILING and 'no library written' in str(e), e\n"
        "else:\n"
        "    assert not FAILING and torch.equal(y, torch.arange(5.0, dtype=torch.float64) * 3)\n"
        "print('ok')\n")
    env = {"SCORCH_CC": "false"} if failing else {}
    run_code(f"FAILING = {failing}\n" + code, tmp_path, **env)


def test_a_compiler_that_writes_nothing_is_a_compile_error(tmp_path):
    """SCORCH_CC=true exits 0 and writes no library: a CompileError naming the compiler
    (it was a RuntimeError about publishing the cache's file)."""
    code = (
        "import torch, scorch\n"
        "A = scorch.to_sparse(torch.eye(5, dtype=torch.float64) * 3, 'csr')\n"
        "try:\n"
        "    scorch.einsum('ij,jk,k->ik', A, torch.ones(5, 7, dtype=torch.float64),\n"
        "                  torch.ones(7, dtype=torch.float64))\n"
        "except scorch.CompileError as e:\n"
        "    assert \"'true' exited with status 0 but wrote no shared object\" in str(e), e\n"
        "else:\n"
        "    raise AssertionError('no error')\n"
        "print('ok')\n")
    run_code(code, tmp_path, SCORCH_CC="true", SCORCH_AOT="0")


@pytest.mark.parametrize("bfmt", ["csr", "dcsr", "dcsc", "coo"])
@pytest.mark.parametrize("expr", ["ij,jk->ik", "ij,kj->ik"])
def test_sparse_product_stores_only_its_entries(expr, bfmt):
    """Whatever the operands' sizes steer the automatic order to, a csr·B product holds
    exactly the coordinates that have a product (no order that walks an output column
    densely and stores every one, zeros included; nor, with B's rows a compressed level,
    the inner-product order that stores every (i,k) of B's nonempty rows)."""
    import scipy.sparse as sps
    rng = np.random.default_rng(7)
    a = sps.random(400, 50, density=0.6, format="csr", random_state=rng, dtype=np.float64)
    rows = np.repeat(np.arange(50), 3)
    b = sps.csr_array((np.ones(150), (rows, np.tile([7, 8, 9], 50))), shape=(50, 20))
    if expr == "ij,kj->ik":
        b = sps.random(30, 50, density=0.05, format="csr", random_state=rng)
    ref = sps.csr_array(a @ (b.T if expr == "ij,kj->ik" else b))
    C = scorch.einsum(expr, scorch.to_sparse(a, "csr"), scorch.to_sparse(b, bfmt))
    assert C.nnz == ref.nnz
    np.testing.assert_allclose(C.to_dense().numpy(), ref.toarray(), rtol=1e-12)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsr", "csc"])
def test_a_literal_zero_factor_gives_zeros(fmt, dtype):
    """An expression that is zero whatever its operands hold (a literal 0 factor) writes
    no value in its loops: the output must still be zeros (it was an unfilled allocation),
    dense, sharing the operand's pattern, or assembled; a 0 in one term only leaves the
    other."""
    x = make_dense((40, 30), dtype=dtype, seed=seed_of("zero-lit"), kind="empty_rows")
    y = make_dense((30, 20), dtype=dtype, seed=seed_of("zero-lit-b"))
    A, B = scorch.to_sparse(x, fmt), scorch.to_sparse(y, fmt)
    for expr, ops, fmt_out, want in [
            ("C(i,j) = 0 * A(i,j)", (A,), None, torch.zeros(40, 30, dtype=dtype)),
            ("C(i,j) = A(i,j) * 0", (A,), "csr", torch.zeros(40, 30, dtype=dtype)),
            ("C(i,j) = 0 * A(i,j)", (A,), "dense", torch.zeros(40, 30, dtype=dtype)),
            ("y(i) = 0 * A(i,j)", (A,), None, torch.zeros(40, dtype=dtype)),
            ("C(i,k) = 0 * A(i,j) * B(j,k)", (A, B), None, torch.zeros(40, 20, dtype=dtype)),
            ("C(i,k) = 0 * A(i,j) * B(j,k)", (A, B), "dense", torch.zeros(40, 20, dtype=dtype)),
            ("C(i,j) = A(i,j) * 0 + A(i,j)", (A,), None, x)]:
        got = dense_of(scorch.kernel(expr, out_format=fmt_out)(*ops))
        assert torch.equal(got, want), (expr, fmt_out)


def test_scalar_output_formats_and_read_limits():
    """A scalar output is dense: out_format="dense" gives it (it was refused as a 0-D
    tensor), a sparse format is refused naming the scalar; too many co-iterated reads
    of one sparse operand name reads, not operands."""
    x = make_dense((5, 4), dtype=torch.float64, seed=seed_of("scalar-out"))
    A = scorch.to_sparse(x, "csr")
    for got in (scorch.einsum("ij->", A, out_format="dense"),
                scorch.kernel("s = A(i,j)", out_format="dense")(A)):
        torch.testing.assert_close(got, x.sum())
    with pytest.raises(ValueError, match="output is a scalar: out_format='csr'"):
        scorch.einsum("ij->", A, out_format="csr")
    text = "C(l) = " + " * ".join(["A(k,l)"] * 7)
    with pytest.raises(NotImplementedError, match="more than 6 reads of sparse operands "
                                                  "co-iterated at index l"):
        scorch.kernel(text)(A)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_more_than_seven_indices_some_of_one_element(fmt):
    # Eight or more indices: the orders of those of more than one iteration are weighed,
    # the one-element ones innermost (first appearance had put i before csc's j).
    g = torch.Generator().manual_seed(0)
    md = (torch.rand(3, 4, generator=g) < 0.5) * torch.randn(3, 4, generator=g)
    M = scorch.to_sparse(md, fmt)
    X, Y = torch.randn(3, 2, generator=g), torch.randn(4, 2, generator=g)
    ones = [torch.randn(1, generator=g) for _ in range(4)]
    s = torch.tensor(0.5)
    for eq, ops in [("ij,ia,ja,ib,jb,ic,jc,z,y,x,w->ij", (M, X, Y, X, Y, X, Y, *ones)),
                    ("ik,jk,,,ij,ia,ja,,,ij->ij", (X, Y, s, s, M, X, Y, s, s, M))]:
        y = scorch.einsum(eq, *ops)
        want = torch.einsum(eq, *[o.to_dense() if isinstance(o, scorch.SparseTensor) else o
                                  for o in ops])
        torch.testing.assert_close(y.to_dense(), want)


@pytest.mark.parametrize("fa,fo", [("csc", "dcsr"), ("csr", "dcsc"), ("dcsr", "dcsc")])
def test_spgemm_never_takes_a_workspace_over_the_whole_output(fa, fo):
    # A 70000² product of 4 entries: a workspace over both of C's levels (order j,i,k)
    # would hold 4.9e9 entries; converting A costs nothing in comparison.
    n = 70000
    t = torch.sparse_coo_tensor(torch.tensor([[0, 5, n - 1, n - 1], [3, n - 1, 0, n - 1]]),
                                torch.tensor([1., 2., 3., 4.]), (n, n)).coalesce()
    A = scorch.to_sparse(t, fa)
    text = scorch.explain("ij,jk->ik", A, A, out_format=fo)
    ws = [ln for ln in text.splitlines() if ln.startswith("schedule")][0]
    assert "workspace(" in ws and "," not in ws.split("workspace(")[1].split(")")[0], ws
    C = scorch.einsum("ij,jk->ik", A, A, out_format=fo)
    want = (t @ t).coalesce()
    coo = C.to_format("coo")
    r, c = (x.long() for x in coo.indices())
    order = torch.argsort(r * n + c)
    wr, wc = want.indices()
    assert torch.equal(r[order], wr) and torch.equal(c[order], wc)
    torch.testing.assert_close(coo.values()[order], want.values())


@pytest.mark.skipif(importlib.util.find_spec("scorch._aot") is None,
                    reason="scorch._aot was not built (SCORCH_AOT=0 at build)")
def test_built_in_kernels_run_without_a_usable_cache_directory(tmp_path):
    # The README's "no C compiler, no disk": a bad cache directory is reported by the
    # first kernel that needs compiling, not by the built-in ones.
    import subprocess
    import sys

    code = (
        "import torch, scorch\n"
        "A = scorch.to_sparse(torch.eye(4), 'csr')\n"
        "assert (A @ torch.ones(4, 3)).sum().item() == 12 and (A + A).nnz == 4\n"
        "try:\n"
        "    scorch.kernel('C(i,j) = A(i,j) * A(i,j) * A(i,j) - A(i,j)')(A)\n"
        "except ValueError as e:\n"
        "    print(e)\n")
    afile = tmp_path / "afile"
    afile.write_text("")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    for where, why in ((afile, "is not a directory"), (shared, "writable by others")):
        env = dict(__import__("os").environ, SCORCH_CACHE_DIR=str(where), SCORCH_AOT="1")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert why in r.stdout


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc", "dcsr", "dense"])
def test_index_notation_reads_one_operand_twice(fmt):
    """Each read of an operand binds its own indices' extents (the last read's alone left
    the others at 1: a 1-row output the kernel wrote past)."""
    x = torch.tensor([[1., 0, 2], [0, 3, 0], [4, 0, 0]])
    A = scorch.to_sparse(x, fmt)
    for expr, want in (("C(i,k) = A(i,j) * A(j,k)", x @ x),
                       ("C(i,k) = A(i,j) * A(k,j)", x @ x.t())):
        for _ in range(2):
            r = scorch.kernel(expr)(A)
            r = r.to_dense() if isinstance(r, scorch.SparseTensor) else r
            torch.testing.assert_close(r, want)
    with pytest.raises(ValueError, match="index 'j' has size 4"):
        scorch.kernel("C(i,k) = A(i,j) * A(j,k)")(scorch.to_sparse(torch.ones(3, 4), fmt))


def test_kernel_objects_refuse_operands_that_require_grad():
    """scorch.kernel computes without autograd: an operand that requires grad is refused
    (its gradient was silently lost), and under no_grad or detached it runs."""
    a = make_dense((4, 5), torch.float64, seed_of("kernel-grad"))
    A, X = scorch.to_sparse(a, "csr"), torch.randn(5, 3, dtype=torch.float64)
    k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)")
    for args in ((A, X.requires_grad_()), (A.detach().requires_grad_(), X.detach())):
        with pytest.raises(RuntimeError, match="without autograd"):
            k(*args)
        with torch.no_grad():
            torch.testing.assert_close(k(*args), a @ X.detach())
    torch.testing.assert_close(k(A, X.detach()), a @ X.detach())


def test_a_coo_tail_output_keeps_its_inner_singletons_nonunique():
    t = torch.zeros(2, 2, 3)
    t[0, 0, 0], t[0, 0, 2], t[1, 1, 1] = 1, 2, 3
    T = scorch.to_sparse(t, "csf")
    with pytest.raises(NotImplementedError, match="same coordinates through a unique"):
        scorch.einsum("ijk->ijk", T, out_format="c(nonunique)ss")   # (0, 0) twice
    u = torch.zeros(2, 2, 3)
    u[0, 0, 0], u[0, 1, 2], u[1, 1, 1] = 1, 2, 3                    # every (i, j) once
    U = scorch.einsum("ijk->ijk", scorch.to_sparse(u, "csf"), out_format="c(nonunique)ss")
    torch.testing.assert_close(U.to_dense(), u)
    r = scorch.einsum("ijk->ijk", T, out_format="c(nonunique)s(nonunique)s")
    torch.testing.assert_close((r * T).to_dense(), t * t)


def test_eight_index_expressions_are_scheduled():
    """Beyond the search (more than 7 indices) the order keeps every sparse tensor's
    levels in order, so a sparse output or operand does not make the kernel illegal."""
    L = "abcdefgh"
    x = make_dense((2,) * 8, torch.float64, seed_of("8-index"))
    S8 = scorch.to_sparse(x, "csf")
    r = scorch.kernel(f"C({','.join(L[::-1])}) = S({','.join(L)})")(S8)
    torch.testing.assert_close(r.to_dense(), x.permute(*range(7, -1, -1)))
    D = torch.randn(3, 3, 2, 2, 2, 2, 2, 2, dtype=torch.float64)
    s = make_dense((3, 3), torch.float64, seed_of("8-index", 2))
    got = torch.einsum("bacdefgh,ab->ab", D, scorch.to_sparse(s, "csr"))
    torch.testing.assert_close(got.to_dense(), torch.einsum("bacdefgh,ab->ab", D, s))
    with pytest.raises(ValueError, match="at most 8 dimensions"):
        torch.einsum("abcdefghi,ab->ab", torch.randn(*[2] * 9), scorch.to_sparse(s, "csr"))
