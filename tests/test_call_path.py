"""The warm call path into the extension: SparseTensors cross as operands parsed once per
tensor (_C.prepare), contiguous dense tensors as themselves (the extension reads their data
pointer, shape and dtype through torch's DLPack exchange table, or its Python API:
test_dlpack_exchange.py runs both), and dense results come back as torch tensors owning
the kernel's array.  What could go wrong there: a stale prepared operand, a dense operand
read with the wrong layout, dtype or offset, a result that aliases."""
import numpy as np
import pytest
import torch

import scorch
from scorch import _C, _compiler


def _pair(dtype=torch.float32, n=7, m=5, k=3):
    g = torch.Generator().manual_seed(3)
    x = torch.rand(n, m, generator=g, dtype=dtype)
    x[x < 0.5] = 0
    return scorch.to_sparse(x, "csr"), x, torch.rand(m, k, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_in_place_change_of_values_is_seen(dtype):
    A, x, X = _pair(dtype)
    torch.testing.assert_close(A @ X, x @ X)
    with torch.no_grad():
        A._vals.mul_(2)            # what an optimizer step does to a sparse weight
    torch.testing.assert_close(A @ X, (2 * x) @ X)


def test_dense_operand_views_with_offsets():
    A, x, X = _pair(n=6, m=8, k=4)
    big = torch.rand(20, 8)
    for view in (big[5:13], big[3:11].clone(), big[::2][:8], big.t()[:, :8].t()[:8]):
        view = view[:, :4] if view.shape[1] != 4 else view
        torch.testing.assert_close(A @ view, x @ view)
        torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, view), x @ view)
    v = torch.rand(30)[7:15]                     # 1-D with a storage offset
    torch.testing.assert_close(A @ v, x @ v)


def test_result_owns_fresh_memory():
    A, x, X = _pair()
    r1, r2 = A @ X, A @ X
    assert type(r1) is torch.Tensor and r1.is_contiguous()
    assert r1.data_ptr() != r2.data_ptr() and r1.data_ptr() != X.data_ptr()
    r1.add_(1)                                   # writable, and not shared with r2
    torch.testing.assert_close(r2, x @ X)
    torch.testing.assert_close(r1, x @ X + 1)


def test_empty_and_one_by_one():
    for n, m, k in [(0, 3, 2), (3, 0, 2), (3, 4, 0), (1, 1, 1)]:
        x = torch.rand(n, m)
        A, X = scorch.to_sparse(x, "csr"), torch.rand(m, k)
        got = A @ X
        assert got.shape == (n, k)
        torch.testing.assert_close(got, x @ X)


def test_mixed_dtypes_promote():
    A, x, X = _pair(torch.float32)
    got = A @ X.double()
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, x.double() @ X.double())


def _kernel_and_descs(A, X):
    entry, descs, _ = _compiler._compile(_compiler._LANG_EINSUM, "ij,jk->ik", (A, X), None,
                                         None)
    return entry[0], descs


def test_extension_refuses_bad_dense_operands():
    A, x, X = _pair()
    kern, descs = _kernel_and_descs(A, X)
    prepared = descs[0]
    ok = _C.run(kern, [prepared, X], 1, True)
    torch.testing.assert_close(ok, x @ X)
    with pytest.raises(ValueError, match="contiguous"):
        _C.run(kern, [prepared, torch.rand(3, 5).t()], 1, True)
    with pytest.raises(TypeError, match="float32, float64, int32 or int64"):
        _C.run(kern, [prepared, X.half()], 1, True)
    with pytest.raises(ValueError, match="dtype int32, the kernel was compiled for float32"):
        _C.run(kern, [prepared, X.to(torch.int32)], 1, True)
    with pytest.raises(ValueError, match="dimensions"):
        _C.run(kern, [prepared, torch.tensor(1.0)], 1, True)
    with pytest.raises(ValueError, match="negative view"):
        _C.run(kern, [prepared, torch._neg_view(X)], 1, True)
    with pytest.raises(ValueError, match="dtype float64"):   # the kernel's own check
        _C.run(kern, [prepared, X.double()], 1, True)
    with pytest.raises(ValueError, match="size mismatch"):
        _C.run(kern, [prepared, torch.rand(4, 3)], 1, True)
    with pytest.raises((TypeError, AttributeError)):
        _C.run(kern, [prepared, np.zeros((5, 3), np.float32)], 1, True)
    with pytest.raises(TypeError):
        _C.prepare(("no",))
    with pytest.raises(ValueError):              # a capsule, but not a prepared operand
        _C.run(kern, [kern, X], 1, True)


def test_prepared_operand_keeps_arrays_alive():
    A, x, X = _pair()
    kern, descs = _kernel_and_descs(A, X)
    prepared = _C.prepare(_compiler._sparse_desc(A, A._vals)[0])
    del A
    import gc
    gc.collect()
    torch.testing.assert_close(_C.run(kern, [prepared, X], 1, True), x @ X)


def test_tuple_result_without_as_torch():
    A, x, X = _pair()
    kern, descs = _kernel_and_descs(A, X)
    shape, (pos, crd, vals) = _C.run(kern, descs, 1)
    assert tuple(shape) == (7, 3)
    np.testing.assert_allclose(vals.reshape(shape), (x @ X).numpy(), rtol=1e-6)


def test_matmul_short_cut_shapes_and_autograd():
    A, x, X = _pair(torch.float64)
    torch.testing.assert_close(A @ X.t().contiguous().t(), x @ X)     # column-major X
    torch.testing.assert_close(A @ X[:, 0], x @ X[:, 0])               # matrix @ vector
    Xg = X.clone().requires_grad_()
    with torch.no_grad():
        r = A @ Xg
    assert r.grad_fn is None and not r.requires_grad
    r = A @ Xg                                                          # records: general route
    assert r.requires_grad
    r.sum().backward()
    torch.testing.assert_close(Xg.grad, x.t() @ torch.ones(7, 3, dtype=torch.float64))
    B = scorch.to_sparse(torch.stack([x, 2 * x]), "csf")
    torch.testing.assert_close(B @ X, torch.stack([x, 2 * x]) @ X)     # batched @ matrix
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        A @ torch.rand(2, 5, 3, 1, dtype=torch.float64)
    Y = torch.rand(2, 3, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(A @ Y, A.to_dense() @ Y)                # matrix @ 4-D batch


def test_kernel_cache_key_sees_size_class():
    """The scheduler chose a kernel's loop order from its first operands' sizes and nnz;
    an operand of a very different size class gets its own entry (and schedule)."""
    g = torch.Generator().manual_seed(5)
    sparse_x = torch.rand(300, 300, generator=g) * (torch.rand(300, 300, generator=g) < 0.001)
    dense_x = torch.rand(300, 300, generator=g) + 0.5
    X = torch.rand(300, 4, generator=g)
    keys = []
    for x in (sparse_x, dense_x, dense_x * 2):
        A = scorch.to_sparse(x, "csc")
        torch.testing.assert_close(A @ X, x @ X)
        keys.append(A._desc[1])
    assert keys[0] != keys[1] and keys[1] == keys[2]


# ---- the remembered kernel (SparseTensor._kernels) ------------------------------------

def test_remembered_kernel_follows_each_call_s_operands():
    """The second call of an expression on the same A runs the kernel the first call
    compiled; dense operands that do not fit it (another dtype, a strided view, other
    sizes) must take the general route, not a wrong kernel."""
    A, x, X = _pair(n=6, m=8, k=4)
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), x @ X)
    assert "ij,jk->ik" in A._kernels
    X64 = X.double()
    got = scorch.einsum("ij,jk->ik", A, X64)              # promotes to float64
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, x.double() @ X64)
    Xt = torch.rand(4, 8).t()                            # column-major view
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, Xt), x @ Xt)
    X5 = torch.rand(8, 5)                                # other dense sizes, same kernel
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X5), x @ X5)
    with pytest.raises(ValueError):
        scorch.einsum("ij,jk->ik", A, torch.rand(7, 4))  # j disagrees
    v = torch.rand(8)
    torch.testing.assert_close(scorch.einsum("ij,j->i", A, v), x @ v)   # another expression
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), x @ X)
    with torch.no_grad():
        A._vals.mul_(3)
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), (3 * x) @ X)


def test_remembered_kernel_is_per_tensor():
    A, x, X = _pair(n=6, m=8, k=4)
    B = scorch.to_sparse(torch.eye(8)[:, :8], "csc")      # another format, same expression
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), x @ X)
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", B, X), X)
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), x @ X)


def test_scorch_einsum_records_autograd():
    A, x, X = _pair(torch.float64, n=6, m=8, k=4)
    A.requires_grad_()
    X.requires_grad_()
    Y = scorch.einsum("ij,jk->ik", A, X)
    assert Y.requires_grad
    Y.square().sum().backward()
    xd = x.clone().requires_grad_()
    Xd = X.detach().clone().requires_grad_()
    (xd @ Xd).square().sum().backward()
    torch.testing.assert_close(X.grad, Xd.grad)
    torch.testing.assert_close(A.grad.to_dense(), xd.grad * (x != 0))
    with pytest.raises(ValueError, match="schedule"):
        scorch.einsum("ij,jk->ik", A, X, schedule="order(i,j,k)")
    with torch.no_grad():
        Y = scorch.einsum("ij,jk->ik", A, X, schedule="order(i,j,k)")
    assert not Y.requires_grad
    torch.testing.assert_close(Y, x @ X.detach())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_results_on_huge_page_allocations(dtype):
    """Results of 4 MB or more come from 2 MiB-aligned allocations advised as huge
    pages; they must still be whole, writable, and freed with the tensor."""
    g = torch.Generator().manual_seed(11)
    x = torch.rand(1500, 200, generator=g, dtype=dtype)
    x[x < 0.9] = 0
    A, X = scorch.to_sparse(x, "csr"), torch.rand(200, 700, generator=g, dtype=dtype)
    for _ in range(3):                        # allocated and freed more than once
        Y = A @ X
        assert Y.numel() * Y.element_size() >= 4 << 20
        torch.testing.assert_close(Y, x @ X)
        Y.add_(1)
    C = scorch.einsum("ij,kj->ik", A, A)      # a sparse output reserved at its bound
    torch.testing.assert_close(C.to_dense(), x @ x.t())


def test_einsum_errors_quote_the_callers_text():
    A = scorch.to_sparse(torch.eye(3), "csr")
    with pytest.raises(ValueError) as e:
        scorch.einsum("ij,jk>ik", A, torch.rand(3, 2))
    assert "\n    ij,jk>ik\n" in str(e.value) + "\n"


def test_kernel_objects_remember_their_kernel_per_settings():
    A, x, X = _pair(n=6, m=8, k=4)
    k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense")
    torch.testing.assert_close(k(A, X), x @ X)
    torch.testing.assert_close(k(A, X.double()), x.double() @ X.double())   # promotes
    k.schedule = "order(i,j,k)"                  # other settings: another kernel
    torch.testing.assert_close(k(A, X), x @ X)
    assert len(A._kernels) == 2
    k2 = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", out_format="csr")
    C = k2(A, X)                                  # a sparse output this time
    assert isinstance(C, scorch.SparseTensor)
    torch.testing.assert_close(C.to_dense(), x @ X)


_REUSE_CHILD = r"""
import sys, torch, scorch
rows, cols = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(12)
full = torch.rand(rows, 200, generator=g) + 1          # every row stored
holes = full.clone()
holes[::3] = 0                                         # every third row empty
X = torch.rand(200, cols, generator=g)
A, H = scorch.to_sparse(full, "csr"), scorch.to_sparse(holes, "dcsr")
Ys = [A @ X for _ in range(3)]
freed = {y.data_ptr() for y in Ys}
assert len(freed) == 3
del Ys
Z = H @ X
assert Z.data_ptr() in freed                           # a kept block, reused
torch.testing.assert_close(Z, holes @ X)
assert Z[::3].abs().max().item() == 0
W = A @ X                                              # Z is alive: other memory
assert W.data_ptr() != Z.data_ptr()
torch.testing.assert_close(W, full @ X)
"""


@pytest.mark.parametrize("rows,cols", [(1499, 701), (251, 263)])   # 4.2 MB, 264 KB
def test_freed_results_are_reused_without_stale_values(rows, cols):
    """A freed result of 64 KiB or more is kept for the next one of about its size: the
    next product gets memory a freed result had, and whatever the old values were, rows
    the new product leaves empty read as zeros.  In a process of its own: the allocator
    lists at most 256 live blocks, and past that (a test worker holding other tests'
    results) a freed block is not kept."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _REUSE_CHILD, str(rows), str(cols)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


_FORK_CHILD = r"""
import os, sys, time, signal
import numpy as np, scipy.sparse as sps, torch, scorch
torch.set_num_threads(2)
m = sps.random(3000, 3000, density=0.01, format="csr", dtype=np.float32, random_state=0)
A = scorch.to_sparse(m, "csr")
X = torch.randn(3000, 64)
ref = scorch.einsum("ij,jk->ik", A, X)        # large enough to run on both threads
pid = os.fork()
if pid == 0:                                   # the child: a kernel and a conversion
    ok = torch.get_num_threads() == 1
    ok = ok and torch.equal(scorch.einsum("ij,jk->ik", A, X), ref)
    ok = ok and torch.equal(scorch.to_sparse(A.to_dense(), "csr").to_dense(), A.to_dense())
    os._exit(0 if ok else 3)
t0 = time.time()
while time.time() - t0 < 60:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.05)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
sys.exit(4)                                    # the child hung
"""


def test_forked_child_runs_kernels_on_one_thread():
    """OpenMP's worker threads do not survive fork, and a child whose parent had started
    them hangs in its first parallel region unless its OpenMP thread count is 1: a fork
    of a process that ran kernels on two threads gets torch.set_num_threads(1), and its
    kernels and conversions finish with the parent's results (exit 4: the child hung)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _FORK_CHILD], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
