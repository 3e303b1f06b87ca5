"""torch.compile over code that uses SparseTensors: scorch's ops run outside the traced
graph (a graph break each, without the warnings Dynamo gives for an extension function
it cannot trace), with the eager results and gradients; importing scorch does not load
torch._dynamo."""
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import scorch
from conftest import make_dense


def model(A, X, W, k):
    h = F.relu(A @ (X @ W))                           # SparseTensor.__matmul__
    S = torch.einsum("ij,ik,jk->ij", A, h, h)          # __torch_function__
    P = torch.softmax(S, 1)
    out = torch.mm(P, h).sum() + scorch.einsum("ij->", A)   # scorch's own function
    # a SparseTensor method, a Kernel (which computes without autograd)
    out = out + A.to_dense().sum() + k(A.detach(), h.detach()).sum()
    return out + (scorch.to_sparse(X @ W, "coo") * 2).sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_function_matches_eager_without_warnings(backend):
    x = make_dense((6, 6), torch.float64, 1) + torch.eye(6, dtype=torch.float64)
    X = make_dense((6, 4), torch.float64, 2, "full").requires_grad_()
    W = make_dense((4, 3), torch.float64, 3, "full")
    k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)")
    results = []
    for fn in (model, torch.compile(model, backend=backend)):
        A = scorch.to_sparse(x, "csr").requires_grad_()
        X.grad = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = fn(A, X, W, k)
            r.backward()
        ours = [str(w.message) for w in caught
                if "scorch" in str(w.message) or "Dynamo does not know" in str(w.message)]
        assert not ours, ours
        results.append((r.detach(), A.grad._vals.clone(), X.grad.clone()))
    for eager, compiled in zip(*results):
        torch.testing.assert_close(compiled, eager)


def test_import_does_not_load_dynamo():
    """torch.compiler.disable imports torch._dynamo (0.8 s); scorch makes its wrappers
    only when torch.compile is tracing."""
    code = "import sys, scorch; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_compiled_module_with_a_sparse_linear_layer():
    torch.manual_seed(0)
    net = torch.nn.Sequential(scorch.nn.SparseLinear(16, 8, density=0.3), torch.nn.ReLU(),
                              torch.nn.Linear(8, 2))
    x = torch.randn(5, 16)
    grads = []
    for fn in (net, torch.compile(net, backend="eager")):
        net.zero_grad()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = fn(x)
            y.square().sum().backward()
        assert not [w for w in caught if "Dynamo does not know" in str(w.message)]
        grads.append((y.detach(), net[0].values.grad.clone()))
    torch.testing.assert_close(grads[1], grads[0])


def step(model, x, t):
    loss = F.mse_loss(model(x), t)
    loss.backward()                  # inside the compiled function: scorch's backward
    return loss                      # kernels run outside the graph too


def sum_of_products(A, X):
    (A @ X).sum().backward()
    return scorch.einsum("ij->", A.detach())


def test_backward_inside_a_compiled_function():
    torch.manual_seed(1)
    layer = scorch.nn.SparseLinear(6, 4, density=0.5)
    x, t = torch.randn(3, 6), torch.randn(3, 4)
    X = torch.randn(6, 2, dtype=torch.float64)
    grads = []
    for fn, g in ((step, sum_of_products), (torch.compile(step, backend="eager"),
                                            torch.compile(sum_of_products, backend="eager"))):
        layer.zero_grad()
        A = scorch.to_sparse(make_dense((5, 6), torch.float64, 4), "coo").requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss = fn(layer, x, t)
            total = g(A, X)
        assert not [w for w in caught if "Dynamo does not know" in str(w.message)]
        grads.append((loss.detach(), layer.values.grad.clone(), total, A.grad.to_dense()))
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("dynamo_first", [False, True])
def test_checks_armed_once_dynamo_is_loaded(dynamo_first):
    """Until torch._dynamo is loaded nothing can be tracing, and scorch's check is a
    builtin returning False; loading it (before or after scorch) arms the real check in
    every module that makes it."""
    code = (("import torch._dynamo\n" if dynamo_first else "") +
            "import sys, torch, scorch\n"
            "mods = [sys.modules[n] for n in scorch._tensor._CHECKED]\n"
            "before = [m._compiling is torch.compiler.is_compiling for m in mods]\n"
            "import torch._dynamo\n"
            "after = [m._compiling is torch.compiler.is_compiling for m in mods]\n"
            "print(before, after)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("] [")
    before, after = out[0] + "]", "[" + out[1].strip()
    n = len(scorch._tensor._CHECKED)
    assert after == str([True] * n)
    assert before == str([dynamo_first] * n)


def test_reading_a_gradient_inside_a_compiled_function():
    A = scorch.to_sparse(make_dense((4, 4), torch.float64, 5), "csr").requires_grad_()
    (A @ torch.ones(4, 2, dtype=torch.float64)).sum().backward()

    def f(A):
        return A.grad.to_dense().sum() * 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(f, backend="eager")(A)
    assert not [w for w in caught if "Dynamo does not know" in str(w.message)]
    torch.testing.assert_close(got, f(A))


def test_torch_export_of_a_sparse_linear_layer_is_refused_by_name():
    """torch.export traces with fake tensors, which have no arrays for a kernel to read:
    the refusal names torch.export and what to do instead, not ".numpy() is not
    supported for tensor subclasses"."""
    layer = scorch.nn.SparseLinear(8, 4, density=0.5, generator=torch.Generator().manual_seed(0))
    x = torch.randn(3, 8)
    with pytest.raises(NotImplementedError, match="torch.export cannot trace scorch"):
        torch.export.export(layer, (x,))
    assert torch.allclose(layer(x), F.linear(x, layer.weight.to_dense(), layer.bias))


def test_scorch_entry_frames_are_never_compiled():
    """After a graph break at a scorch call, dynamo compiled the frame of scorch's entry
    point (the wrapper of every public function, one code object for all of them, and
    SparseTensor.__torch_function__ / __matmul__), guarding on the function and shapes:
    enough models in one process hit its recompile limit, with a warning.  Those frames
    are now skipped, recursively: no compiled entries for their code."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from scorch import _tensor

    def f(x, X):
        A = scorch.to_sparse(x, "csr")
        return (A @ X).relu().sum() + torch.mm(A, X).sum()

    for n in range(2, 5):
        x, X = torch.eye(n), torch.randn(n, 3)
        torch.testing.assert_close(torch.compile(f, backend="eager", dynamic=False)(x, X),
                                   f(x, X))
    for code in (_tensor._WRAPPER_CODE, _tensor.outside.__code__,
                 _tensor.SparseTensor.__matmul__.__code__,
                 _tensor.SparseTensor.__torch_function__.__func__.__code__):
        assert _debug_get_cache_entry_list(code) == [], code.co_name
