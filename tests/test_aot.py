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
_COMMON = r"""
import torch, scorch
import torch.nn.functional as F
from scorch import _C
path, n, why = _C.aot_info()
assert n > 0 and why is None, (path, n, why)
g = torch.Generator().manual_seed(1)
rows, cols = 40, 30
for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
    for index in (torch.int32, torch.int64):
        for fmt in ("csr", "csc", "coo"):
            d = (torch.rand(rows, cols, generator=g) < 0.1) * torch.randint(1, 5, (rows, cols), generator=g)
            d = d.to(dtype)
            A = scorch.to_sparse(d, fmt, index_dtype=index)
            x = torch.randint(-3, 4, (cols,), generator=g).to(dtype)
            assert torch.equal(A @ x, d @ x), (dtype, index, fmt, "spmv")
            for K in (16, 64):
                X = torch.randint(-3, 4, (cols, K), generator=g).to(dtype)
                Y = torch.randint(-3, 4, (rows, K), generator=g).to(dtype)
                assert torch.equal(A @ X, d @ X), (dtype, index, fmt, "spmm", K)
                assert torch.equal(A.t() @ Y, d.t() @ Y), (dtype, index, fmt, "spmm t", K)
                S = scorch.einsum("ij,ik,jk->ij", A, Y, X)
                assert torch.equal(S.to_dense(), d * (Y @ X.t())), (dtype, index, fmt, "sddmm", K)
            assert torch.equal((A + A).to_dense(), d + d), (dtype, index, fmt, "add")
            assert torch.equal((A * A).to_dense(), d * d), (dtype, index, fmt, "mul")
            assert torch.equal(A.sum(0), d.sum(0)), (dtype, index, fmt, "sum")
            if dtype.is_floating_point:
                W = A.detach().requires_grad_()
                X = torch.rand(cols, 16, dtype=dtype, requires_grad=True)
                (W @ X).sum().backward()
                dW = W.grad.to_dense()
                assert torch.allclose(dW, (d != 0) * X.detach().sum(1).expand(rows, cols)), fmt
stats = _C.jit_stats()
assert stats["compiles"] == 0 and stats["disk_hits"] == 0, stats
"""


def test_common_products_need_no_compiler(tmp_path):
    """SpMV, SpMM (K = 16, 64, and through a transpose), SDDMM, add, mul, sums and an
    autograd step over csr/csc/coo, four value dtypes and two index widths, equal to the
    dense results, with SCORCH_CC naming no compiler: nothing is compiled."""
    run_code(_COMMON + "print('ok')", tmp_path, SCORCH_CC="/nonexistent/cc")


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


def test_sized_kernel_replaces_the_generic_one(tmp_path):
    """The first SpMM with K = 16 runs the generic built-in kernel at once (no fixed
    sizes) while the kernel written for K = 16 compiles on a thread; a later call runs
    that one, and every result equals the dense product."""
    run_code(r"""
import time, torch, scorch
from scorch import _C, _compiler
d = (torch.rand(200, 150) < 0.05) * torch.rand(200, 150)
A = scorch.to_sparse(d, "csr")
X = torch.rand(150, 16)
assert torch.allclose(A @ X, d @ X, atol=1e-5)
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
