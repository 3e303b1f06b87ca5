"""Ahead-of-time kernels (setup.py builds scorch._aot from tools/aot_signatures.json).

Each test runs in a child process with a kernel cache of its own, since what it checks
is what happens before anything is cached: the common products run the built-in kernels
with no C compiler at all (SCORCH_CC pointing nowhere), a product written for its sizes
runs the generic built-in kernel at once and its own once the background compile is done,
and SCORCH_AOT=0 turns the table off.
"""
import functools
import importlib.machinery
import os

import pytest

import conftest
import scorch

_BUILT = any(os.path.isfile(os.path.join(os.path.dirname(scorch.__file__), "_aot" + s))
             for s in importlib.machinery.EXTENSION_SUFFIXES)
pytestmark = pytest.mark.skipif(not _BUILT,
                                reason="scorch._aot was not built (SCORCH_AOT=0 at build)")
# (the suite's conftest turns the table off; these children turn it on)
run_code = functools.partial(conftest.run_code, SCORCH_AOT="1")

# The recorded workloads' shapes (tools/aot.py): the scheduler picks the same loop orders.
# Each product runs over a SparseTensor and over the dense tensor it stands for; with float
# values, so do its gradients (the sparse operand's at its pattern), from a loss that sums
# the result and, for a dense result, from one that weights it.
_COMMON = r"""
import torch, scorch
import torch.nn.functional as F
from scorch import _C
path, n, why = _C.aot_info()
assert n > 0 and why is None, (path, n, why)
g = torch.Generator().manual_seed(1)
rows, cols = 40, 30

def ints(*shape, lo=-3, hi=4):
    return torch.randint(lo, hi, shape, generator=g).to(dtype)

def check(what, fn, sparse, d, *dense):
    out, want = fn(sparse, *dense), fn(d, *dense)
    got = out.to_dense() if isinstance(out, scorch.SparseTensor) else out
    assert torch.equal(got, want), (what, dtype, index, fmt)
    if not dtype.is_floating_point:   # (integers have no gradients)
        return
    weights = [None] if isinstance(out, scorch.SparseTensor) else [None, ints(*want.shape)]
    for w in weights:
        grads = []
        for a in (sparse, d):
            ops = [x.detach().requires_grad_() for x in (a, *dense)]
            out = fn(*ops)
            (out.sum() if w is None else (out * w).sum()).backward()
            grads.append([o.grad.to_dense() if isinstance(o, scorch.SparseTensor)
                          else o.grad for o in ops])
        (gs, *gxs), (gd, *gdxs) = grads
        assert torch.equal(gs, gd * (d != 0)), (what, "grad", w is None, dtype, index, fmt)
        for gx, gdx in zip(gxs, gdxs):
            assert torch.equal(gx, gdx), (what, "dense grad", w is None, dtype, index, fmt)

sddmm = lambda a, y, x: torch.einsum("ij,ik,jk->ij", a, y, x)
for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
    for index in (torch.int32, torch.int64):
        for fmt in ("csr", "csc", "coo"):
            d = (torch.rand(rows, cols, generator=g) < 0.1) * torch.randint(1, 5, (rows, cols), generator=g)
            d = d.to(dtype)
            A = scorch.to_sparse(d, fmt, index_dtype=index)
            sq = d[:cols].contiguous()
            S = scorch.to_sparse(sq, fmt, index_dtype=index)
            check("spmv", lambda a, x: a @ x, A, d, ints(cols))
            for K in (16, 64):
                check(("spmm", K), lambda a, x: a @ x, A, d, ints(cols, K))
                check(("spmm t", K), lambda a, y: a.t() @ y, A, d, ints(rows, K))
                check(("dense @ sparse", K), lambda a, y: y.t() @ a, A, d, ints(rows, K))
                check(("sddmm", K), sddmm, A, d, ints(rows, K), ints(cols, K))
            for batch in (2, 8, 64):
                check(("linear", batch), lambda a, x: F.linear(x, a), A, d,
                      ints(batch, cols))
            check("linear, sparse input", lambda a, w: F.linear(a, w), A, d, ints(16, cols))
            check("spgemm", lambda s: s @ s, S, sq)
            check("spgemm t", lambda a: a @ a.t(), A, d)
            check("add", lambda a: a + a, A, d)
            check("add dense", lambda a, x: a + x, A, d, ints(rows, cols))
            check("mul", lambda a: a * a, A, d)
            check("mul dense", lambda a, x: a * x, A, d, ints(rows, cols))
            check("scale", lambda a: a * 2, A, d)
            check("sum 0", lambda a: a.sum(0), A, d)
            check("sum 1", lambda a: a.sum(1), A, d)

# (a 2x3 example, which tools/aot.py records too: on a few rows the scheduler weighs
# loop orders otherwise)
A = scorch.to_sparse(torch.tensor([[1., 0, 2], [0, 3, 0]]), "csr").requires_grad_()
(A * A).sum().backward()
assert torch.equal(A.grad.to_dense(), torch.tensor([[2., 0, 4], [0, 6, 0]]))
A.grad = None
torch.einsum("ij,ik,jk->ij", A, torch.ones(2, 16), torch.ones(3, 16)).sum().backward()
assert torch.equal(A.grad.to_dense(), torch.tensor([[16., 0, 16], [0, 16, 0]]))
W = scorch.to_sparse(torch.tensor([[1, 0, 2], [0, 3, 0]]), "csr")
assert torch.equal(F.linear(torch.ones(2, 3, dtype=torch.int64), W),
                   torch.tensor([[3, 3], [3, 3]]))
stats = _C.jit_stats()
assert stats["compiles"] == 0 and stats["disk_hits"] == 0, stats
"""


def test_common_products_need_no_compiler(tmp_path):
    """SpMV, SpMM (K = 16, 64, through a transpose, and F.linear both ways), SDDMM, SpGEMM,
    add, mul and sums over csr/csc/coo, four value dtypes and two index widths, and with
    float values their gradients, equal to the dense results, with SCORCH_CC naming no
    compiler: nothing is compiled."""
    run_code(_COMMON + "print('ok')", tmp_path, SCORCH_CC="/nonexistent/cc")


def test_other_shapes_find_a_built_in_kernel_without_a_compiler(tmp_path):
    """Where the scheduler would pick a loop order, or a relayout of a dense operand, that
    the table lacks (seen at a few rows or columns: F.linear's gradients on an 8 x 1 or
    1 x 3 weight, sparse * dense's on a 5 x 2 csc, A @ A.t() of a 1 x 1, a sparse
    F.linear input of 2 rows, Y.t() @ A with Y of one row), a call without a compiler runs a built-in kernel of the
    same product in another order; the results and gradients equal the dense ones and
    explain says what stood in."""
    run_code(r"""
import torch, scorch
import torch.nn.functional as F
from scorch import _C
g = torch.Generator().manual_seed(0)

def check(fn, d, fmt, *dense):
    A = scorch.to_sparse(d, fmt).requires_grad_()
    D = d.clone().requires_grad_()
    xs = [x.clone().requires_grad_() for x in dense]
    xd = [x.clone().requires_grad_() for x in dense]
    out, want = fn(A, *xs), fn(D, *xd)
    got = out.to_dense() if isinstance(out, scorch.SparseTensor) else out
    assert torch.allclose(got, want, atol=1e-6), (fn, d.shape, fmt)
    out.sum().backward()
    want.sum().backward()
    assert torch.allclose(A.grad.to_dense(), D.grad * (d != 0), atol=1e-6), (d.shape, fmt)
    for x, y in zip(xs, xd):
        assert torch.allclose(x.grad, y.grad, atol=1e-6), (d.shape, fmt)

def pattern(rows, cols, density):
    return (torch.rand(rows, cols, generator=g) < density) * torch.rand(rows, cols, generator=g)

for fmt in ("csr", "csc", "coo"):
    check(lambda a, x: F.linear(x, a), torch.rand(8, 1, generator=g), fmt, torch.rand(4, 1))
    check(lambda a, x: F.linear(x, a), torch.rand(1, 3, generator=g), fmt, torch.rand(3, 3))
    check(lambda a, x: F.linear(x, a), pattern(8, 3, 0.2), fmt, torch.rand(4, 3))
    check(lambda a, x: a * x, pattern(5, 2, 0.6), fmt, torch.rand(5, 2))
    check(lambda a: a @ a.t(), torch.rand(1, 1, generator=g), fmt)
    check(lambda a, w: F.linear(a, w), pattern(2, 20, 0.6), fmt, torch.rand(5, 20))
    # (Y.t() of one row is contiguous as torch has it, and still a transposed view)
    check(lambda a, y: y.t() @ a, pattern(1, 7, 0.6), fmt, torch.rand(1, 16))
assert _C.jit_stats()["compiles"] == 0
text = scorch.explain("kj,ak,aj->kj", scorch.to_sparse(torch.rand(8, 1), "csr"),
                      torch.rand(4, 8), torch.rand(4, 1))
assert "is not built in and no C compiler runs here" in text, text
print("ok")
""", tmp_path, SCORCH_CC="/nonexistent/cc")


def test_product_outside_the_table_says_the_compiler_is_missing(tmp_path):
    """A product no table holds still needs the compiler, and says so."""
    run_code(r"""
import torch, scorch
d = torch.rand(3, 4, 5)
A = scorch.to_sparse(d, "csf")
try:
    scorch.einsum("ijk,k->ij", A, torch.rand(5))
except Exception as e:
    assert "C compiler" in str(e) and "SCORCH_CC" in str(e), e
else:
    raise AssertionError("compiled without a compiler")
print("ok")
""", tmp_path, SCORCH_CC="/nonexistent/cc")


# A child's first SpMM with K = 16 (the built-in table's kernel is generic in K)
_SPMM_16 = r"""
import torch, scorch
from scorch import _C, _compiler
d = (torch.rand(200, 150) < 0.05) * torch.rand(200, 150)
A = scorch.to_sparse(d, "csr")
X = torch.rand(150, 16)
assert torch.allclose(A @ X, d @ X, atol=1e-5)
"""


def test_sized_kernel_replaces_the_generic_one(tmp_path):
    """The first SpMM with K = 16 runs the generic built-in kernel at once (no fixed
    sizes) while the kernel written for K = 16 compiles on a thread; a later call runs
    that one, and every result equals the dense product."""
    run_code("import time\n" + _SPMM_16 + r"""
(entry,) = [e for e in _compiler._KERNELS.values()]
assert _C.kernel_times(entry[0])[2] and entry[5] == () and entry[6] is not None
assert A._kernels is None   # (not remembered while the generic kernel stands in)
deadline = time.monotonic() + 120
while entry[6] is not None and time.monotonic() < deadline:
    assert torch.allclose(A @ X, d @ X, atol=1e-5)
    (entry,) = [e for e in _compiler._KERNELS.values()]
    time.sleep(0.01)
assert entry[6] is None and entry[5] == ((1, 1, 16),), entry[5]
assert not _C.kernel_times(entry[0])[2]
assert _C.jit_stats()["compiles"] == 1
assert torch.allclose(A @ X, d @ X, atol=1e-5)
assert "written for" in scorch.explain(torch.mm, A, X)
print("ok")
""", tmp_path)


def test_a_process_that_exits_at_once_publishes_its_sized_kernel(tmp_path):
    """A script that exits right after its first SpMM waits for the kernel written for
    its K, compiling in the background, to be published: the next process finds it in
    the cache (no compile) and no temporary file of the compile is left behind.  (The
    interpreter used to exit first: the compiler ran on as an orphan, its files stayed,
    and every start compiled the kernel again.)"""
    run_code(_SPMM_16 + r"""
assert [e for e in _compiler._KERNELS.values() if e[6] is not None]   # still compiling
print("ok")
""", tmp_path)
    names = sorted(os.listdir(tmp_path))
    assert not [n for n in names if "-" in n and not n.startswith("gathers-")], names
    assert len([n for n in names if n.endswith(".so")]) == 1, names
    run_code(_SPMM_16 + r"""
(entry,) = [e for e in _compiler._KERNELS.values()]
assert entry[6] is None and entry[5] == ((1, 1, 16),), entry
assert _C.jit_stats()["compiles"] == 0, _C.jit_stats()
print("ok")
""", tmp_path)


def test_sized_kernel_that_cannot_compile_leaves_the_generic_one(tmp_path):
    """Without a compiler the background compile fails; the generic kernel keeps
    serving, and the call never raises."""
    run_code(r"""
import time, torch, scorch
from scorch import _compiler
d = (torch.rand(200, 150) < 0.05) * torch.rand(200, 150)
A = scorch.to_sparse(d, "csr")
X = torch.rand(150, 64)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    assert torch.allclose(A @ X, d @ X, atol=1e-5)
    (entry,) = [e for e in _compiler._KERNELS.values()]
    if entry[6] is None:
        break
    time.sleep(0.01)
assert entry[6] is None and entry[5] == ()
assert torch.allclose(A @ X, d @ X, atol=1e-5)
print("ok")
""", tmp_path, SCORCH_CC="/nonexistent/cc")


def test_explain_names_a_built_in_kernel(tmp_path):
    run_code(r"""
import torch, scorch
A = scorch.to_sparse(torch.eye(40, 30), "csr")
text = scorch.explain(torch.mv, A, torch.rand(30))
assert "ahead of time" in text and "generated C" in text, text
print("ok")
""", tmp_path)


def test_off_switch(tmp_path):
    run_code(r"""
import torch, scorch
from scorch import _C
assert _C.aot_info() == (None, 0, None)
A = scorch.to_sparse(torch.eye(40, 30), "csr")
assert torch.equal(A @ torch.ones(30), torch.eye(40, 30) @ torch.ones(30))
assert _C.jit_stats()["compiles"] == 1
print("ok")
""", tmp_path, SCORCH_AOT="0")
