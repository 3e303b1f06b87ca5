"""The hot route in the extension (_C.remembered): a SparseTensor's remembered kernel run on
its prepared operand and plain dense tensors with no Python step.  It must serve exactly the
calls the Python route would serve with the same kernel, hand every other call back (None)
rather than run a wrong kernel or swallow what the general route would report, wrap every
output kind as the Python route does, and hold no references after it returns."""
import sys

import pytest
import torch

import scorch
from scorch import _C, _compiler


def _pair(dtype=torch.float32, n=7, m=5, k=3, fmt="csr"):
    g = torch.Generator().manual_seed(5)
    x = torch.rand(n, m, generator=g, dtype=dtype)
    x[x < 0.5] = 0
    return scorch.to_sparse(x, fmt), x, torch.rand(m, k, generator=g, dtype=dtype)


def _no_compile(monkeypatch):
    """Make the general route fail loudly: a call served by the extension never reaches it."""
    def refuse(*args, **kwargs):
        raise AssertionError("the general route ran")
    monkeypatch.setattr(_compiler, "_compile", refuse)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_second_call_is_served_by_the_extension(monkeypatch, fmt, dtype):
    A, x, X = _pair(dtype, fmt=fmt)
    v = torch.rand(5, dtype=dtype)
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), x @ X)
    torch.testing.assert_close(A @ X, x @ X)   # (torch's products remember their own key:
    torch.testing.assert_close(torch.mv(A, v), x @ v)   # their shape rule is not einsum's)
    _no_compile(monkeypatch)
    for _ in range(2):
        torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, X), x @ X)
        torch.testing.assert_close(A @ X, x @ X)
        torch.testing.assert_close(torch.mm(A, X), x @ X)
        torch.testing.assert_close(torch.mv(A, v), x @ v)
    X2 = torch.rand(5, 3, dtype=dtype)               # other values, same sizes: same kernel
    torch.testing.assert_close(A @ X2, x @ X2)


@pytest.mark.parametrize("expr", ["ij,jk->ik", "ij,j->i"])
def test_converted_copy_served_while_its_version_holds(expr):
    """COO runs a kernel over its DCSR copy: the extension serves the second call on that
    copy, and hands the call back once the values changed in place (the copy is stale)."""
    A, x, X = _pair(torch.float64, fmt="coo")
    b = X if expr == "ij,jk->ik" else X[:, 0].contiguous()
    torch.testing.assert_close(scorch.einsum(expr, A, b), x @ b)
    (_, copy, _), = A._transposed.values()
    n, entry, prepared, version, values, indices = A._kernels[expr]
    assert prepared is copy._desc[0] and version == A._vals._version and values is A._vals
    assert [x for x, _ in indices] == [x for x in A._pos + A._crd if x is not None]
    torch.testing.assert_close(_C.remembered(expr, (A, b)), x @ b)
    A.values().mul_(2)
    assert _C.remembered(expr, (A, b)) is None               # stale copy: general route
    torch.testing.assert_close(scorch.einsum(expr, A, b), 2 * x @ b)
    torch.testing.assert_close(_C.remembered(expr, (A, b)), 2 * x @ b)   # the new copy
    A._crd[1][0] = A._crd[1][0]       # (an index array written: refused, not served)
    assert _C.remembered(expr, (A, b)) is None
    with pytest.raises(ValueError, match="written in place"):
        scorch.einsum(expr, A, b)


@pytest.mark.parametrize("expr, dense, out", [
    ("ij,ik,jk->ij", [(7, 2), (5, 2)], "sparse"),    # SDDMM: the pattern of A
    ("ij,jk->ki", [(5, 3)], "permuted"),             # a dense output in another order
    ("ij,ij->", [(7, 5)], "scalar"),
    ("ij,jk->ik", [(5, 3)], "dense"),
])
def test_every_output_kind_is_wrapped(monkeypatch, expr, dense, out):
    A, x, _ = _pair(torch.float64)
    g = torch.Generator().manual_seed(8)
    ops = [torch.rand(*s, generator=g, dtype=torch.float64) for s in dense]
    first = scorch.einsum(expr, A, *ops)
    assert _C.remembered(expr, (A, *ops)) is not None
    _no_compile(monkeypatch)
    got = scorch.einsum(expr, A, *ops)
    want = torch.einsum(expr, x, *ops)
    if out == "sparse":
        assert isinstance(got, scorch.SparseTensor) and got.format == first.format
        torch.testing.assert_close(got.to_dense(), want * (x != 0))
    else:
        assert type(got) is torch.Tensor and got.shape == want.shape
        torch.testing.assert_close(got, want)


def test_calls_it_does_not_serve_are_handed_back():
    A, x, X = _pair(n=6, m=8, k=4)
    key = "ij,jk->ik"
    assert _C.remembered(key, (A, X)) is None                # nothing remembered yet
    scorch.einsum(key, A, X)
    assert _C.remembered(key, (A, X)) is not None
    assert _C.remembered("ij,j->i", (A, X[:, 0].contiguous())) is None   # another key
    assert _C.remembered(key, (A, X, X)) is None             # another operand count
    assert _C.remembered(key, (A,)) is None
    assert _C.remembered(key, (A, X.double())) is None       # a dtype to promote
    assert _C.remembered(key, (A, torch.rand(4, 8).t())) is None   # a strided view
    assert _C.remembered(key, (A, torch.rand(7, 4))) is None       # j disagrees
    assert _C.remembered(key, (A, torch.nn.Parameter(X))) is None  # not a plain tensor
    assert _C.remembered(key, (X, A)) is None                # not a SparseTensor first
    assert _C.remembered(key, (A, 3.0)) is None
    assert _C.remembered(["unhashable"], (A, X)) is None
    # ... and the public calls still give the right answers or the general route's errors
    torch.testing.assert_close(scorch.einsum(key, A, X.double()), x.double() @ X.double())
    torch.testing.assert_close(A @ torch.nn.Parameter(X), x @ X)
    with pytest.raises(ValueError):
        scorch.einsum(key, A, torch.rand(7, 4))


def test_autograd_recording_takes_the_general_route():
    A, x, X = _pair(torch.float64, n=6, m=8, k=4)
    scorch.einsum("ij,jk->ik", A, X)
    Xg = X.clone().requires_grad_()
    assert _C.remembered("ij,jk->ik", (A, Xg)) is None
    Y = A @ Xg
    assert Y.grad_fn is not None
    Y.sum().backward()
    torch.testing.assert_close(Xg.grad, x.sum(0, keepdim=True).t().expand(8, 4))
    with torch.no_grad():                                    # not recording: served
        r = _C.remembered("ij,jk->ik", (A, Xg))
        assert r is not None and not r.requires_grad
        torch.testing.assert_close(r, x @ X)
    A.requires_grad_()                                       # the sparse values record too
    assert _C.remembered("ij,jk->ik", (A, X)) is None
    assert (A @ X).grad_fn is not None


def test_thread_count_follows_torch():
    A, x, X = _pair(n=300, m=300, k=16)
    scorch.einsum("ij,jk->ik", A, X)
    old = torch.get_num_threads()
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            torch.testing.assert_close(A @ X, x @ X)
    finally:
        torch.set_num_threads(old)


def test_interrupts_are_not_swallowed():
    """Only ordinary exceptions hand the call back; a KeyboardInterrupt raised while the
    extension reads an operand goes on up."""
    A, x, X = _pair()
    scorch.einsum("ij,jk->ik", A, X)

    class Interrupting(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(getattr(func, "__self__", None), "__name__", "") == "requires_grad":
                raise KeyboardInterrupt
            return func(*args, **(kwargs or {}))

    with pytest.raises(KeyboardInterrupt), Interrupting():
        _C.remembered("ij,jk->ik", (A, X))


def test_no_references_are_kept():
    A, x, X = _pair(n=6, m=8, k=4)
    scorch.einsum("ij,jk->ik", A, X)
    entry = A._kernels["ij,jk->ik"][1]
    B = scorch.einsum("ij,ik,jk->ij", A, torch.rand(6, 2), torch.rand(8, 2))   # sparse out
    sddmm = A._kernels["ij,ik,jk->ij"][1]
    U, V = torch.rand(6, 2), torch.rand(8, 2)
    watched = (A, X, entry, sddmm, A._desc[0], A._desc, A._kernels, A._vals, U)
    counts = [sys.getrefcount(o) for o in watched]
    for _ in range(50):
        _C.remembered("ij,jk->ik", (A, X))
        _C.remembered("ij,jk->ik", (A, X.double()))          # handed back
        _C.remembered("ij,jk->ik", (A, torch.rand(7, 4)))    # refused by the kernel
        _C.remembered("ij,ik,jk->ij", (A, U, V))
    assert [sys.getrefcount(o) for o in watched] == counts
    assert isinstance(B, scorch.SparseTensor)


def test_products_never_run_a_kernel_einsum_compiled_for_a_stretch():
    """einsum stretches a contracted dimension of 1; torch.mm refuses it.  A kernel that
    einsum compiled (and A remembers) for such a stretch must not serve A @ X."""
    A, x, X = _pair()
    one = torch.rand(1, 3)
    torch.testing.assert_close(scorch.einsum("ij,jk->ik", A, one), x.sum(1, keepdim=True) * one)
    for call in (lambda: A @ one, lambda: torch.mm(A, one), lambda: torch.matmul(A, one)):
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            call()
    torch.testing.assert_close(A @ X, x @ X)
