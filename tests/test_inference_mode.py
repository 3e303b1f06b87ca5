"""Sparse tensors under torch.inference_mode, and tensors made there used outside it.

torch counts no versions of an inference tensor (reading ``_version`` raises), and scorch
keys what it keeps (converted copies, the pattern records of ``_moved``, enable()'s views
of torch CSR tensors, deferred products) on versions: nothing is kept for such tensors,
and every call computes as it would without inference mode.
"""
import pytest
import torch

import scorch
from conftest import make_dense, seed_of

FORMATS = ("csr", "csc", "coo", "dcsr")


@pytest.mark.parametrize("fmt", FORMATS)
def test_attention_chain_in_inference_mode(fmt):
    m = make_dense((6, 6), torch.float32, seed_of("inference-attention", fmt))
    Q, K, V = (make_dense((6, 4), torch.float32, s, kind="full") for s in (1, 2, 3))
    M = scorch.to_sparse((m != 0).float(), fmt)
    with torch.inference_mode():
        S = torch.einsum("ij,ik,jk->ij", M, Q, K)
        P = torch.softmax(S, dim=1)
        out = P @ V
        twice = P @ V   # (a second call: nothing kept from the first)
    dense = torch.where(m != 0, Q @ K.t(), float("-inf")).softmax(1).nan_to_num(0.0) @ V
    torch.testing.assert_close(out, dense)
    torch.testing.assert_close(twice, dense)


@pytest.mark.parametrize("fmt", FORMATS)
def test_tensors_made_in_inference_mode_work_outside(fmt):
    x = make_dense((5, 4), torch.float32, seed_of("inference-outside", fmt))
    X, Y = make_dense((4, 3), torch.float32, 1), make_dense((5, 2), torch.float32, 2)
    with torch.inference_mode():
        A = scorch.to_sparse(x, fmt)
    torch.testing.assert_close(A @ X, x @ X)
    torch.testing.assert_close(A.t() @ Y, x.t() @ Y)
    torch.testing.assert_close(A.sum(0), x.sum(0))
    torch.testing.assert_close(A[:, [0, 2]].to_dense(), x[:, [0, 2]])
    with torch.inference_mode():
        B = scorch.to_sparse(x, fmt)
        torch.testing.assert_close(B @ X, x @ X)
        torch.testing.assert_close(B.t() @ Y, x.t() @ Y)


def test_enabled_torch_csr_made_in_inference_mode():
    x = make_dense((5, 4), torch.float32, seed_of("inference-enabled"))
    X = make_dense((4, 3), torch.float32, 1)
    with torch.inference_mode():
        C = x.to_sparse_csr()
        with scorch.enabled():
            torch.testing.assert_close(torch.mm(C, X), x @ X)
    with scorch.enabled():
        torch.testing.assert_close(torch.mm(C, X), x @ X)


def test_compile_with_operands_made_in_inference_mode():
    m = make_dense((5, 6), torch.float32, seed_of("inference-compile"))
    B = scorch.to_sparse(m, "csr")
    with torch.inference_mode():
        Q, K = make_dense((5, 3), torch.float32, 1), make_dense((6, 3), torch.float32, 2)
    f = scorch.compile(lambda M, Q, K: M * (Q @ K.T))
    torch.testing.assert_close(f(B, Q, K).to_dense(), m * (Q @ K.T))


def test_sparse_linear_made_in_inference_mode():
    """Used under no_grad afterwards, as an nn.Linear made there is (with grad mode on,
    torch refuses to save inference tensors for backward, for both)."""
    with torch.inference_mode():
        layer = scorch.nn.SparseLinear(6, 4, density=0.5,
                                       generator=torch.Generator().manual_seed(0))
        x = torch.ones(2, 6)
        y = layer(x)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), y)
    want = x @ layer.weight.detach().to_dense().t() + layer.bias
    torch.testing.assert_close(y, want)
