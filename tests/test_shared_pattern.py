"""Outputs with an operand's pattern share that operand's index arrays (no copy).

SDDMM, sampled products and zero-preserving elementwise ops keep the sampling operand's
pattern: the kernel writes values only and the result's pos/crd are the operand's own
arrays (scorch_rt.h: borrowed).  Checked against dense, including where sharing cannot
apply (another index width, a pattern the kernel transposes)."""
import gc

import pytest
import torch

import scorch


def _dense(m, n, density, seed):
    g = torch.Generator().manual_seed(seed)
    d = torch.rand(m, n, generator=g, dtype=torch.float64)
    return d * (torch.rand(m, n, generator=g, dtype=torch.float64) < density)


def _same_memory(a, b):
    return a is not None and b is not None and a.data_ptr() == b.data_ptr()


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,density", [((1, 1), 1.0), ((0, 5), 0.5), ((7, 0), 0.5),
                                           ((40, 23), 0.0), ((40, 23), 0.2), ((300, 170), 0.05)])
def test_sddmm_shares_pattern(fmt, index_dtype, dtype, shape, density):
    d = _dense(*shape, density, seed=shape[0] + shape[1]).to(dtype)
    A = scorch.to_sparse(d, fmt, index_dtype=index_dtype)
    U = torch.rand(shape[0], 19, dtype=dtype)
    V = torch.rand(shape[1], 19, dtype=dtype)
    S = scorch.einsum("ij,ik,jk->ij", A, U, V)
    assert S.format == A.format and S.index_dtype == index_dtype
    torch.testing.assert_close(S.to_dense(), d * (U @ V.T))
    if A.nnz:
        assert _same_memory(S._crd[1], A._crd[1]) and _same_memory(S._pos[1], A._pos[1])
    # the result outlives the operand it shares with
    crd = A._crd[1].clone()
    del A
    gc.collect()
    assert torch.equal(S._crd[1], crd)
    torch.testing.assert_close(S.to_dense(), d * (U @ V.T))


def test_shared_levels_are_the_operands_own_tensors():
    """The shared pos and crd are the operand's own torch tensors, not new tensors around
    the same memory: on the first call, on the remembered route of the calls after it,
    and where the operand's values are converted for the run (f32 values, f64 kernel).
    Values are the result's own."""
    d = _dense(50, 40, 0.2, seed=6)
    for A in (scorch.to_sparse(d, "csr"), scorch.to_sparse(d.float(), "csr")):
        U, V = torch.rand(50, 16, dtype=torch.float64), torch.rand(40, 16, dtype=torch.float64)
        for _ in range(3):
            S = scorch.einsum("ij,ik,jk->ij", A, U, V)
            torch.testing.assert_close(S.to_dense(), d * (U @ V.T), rtol=1e-5, atol=1e-5)
            assert S._pos[1] is A._pos[1] and S._crd[1] is A._crd[1]
            assert S._pos[0] is None and S._crd[0] is None
            assert not _same_memory(S._vals, A._vals)


def test_elementwise_shares_and_leaves_operand():
    d = _dense(60, 45, 0.1, seed=3) - 0.05
    A = scorch.to_sparse(d, "csr")
    before = [t.clone() for t in (A._pos[1], A._crd[1], A._vals)]
    for r, ref in ((A.relu(), d.relu()), (A * 3, d * 3), (-A, -d)):
        torch.testing.assert_close(r.to_dense(), ref)
        assert _same_memory(r._crd[1], A._crd[1])
    for t, b in zip((A._pos[1], A._crd[1], A._vals), before):
        assert torch.equal(t, b)


def test_other_index_width_copies():
    """A kernel whose output index width differs from the operand's copies the pattern."""
    d = _dense(30, 30, 0.2, seed=4)
    A = scorch.to_sparse(d, "csr", index_dtype=torch.int32)
    B = scorch.to_sparse(d, "csr", index_dtype=torch.int64)
    C = scorch.einsum("ij,ij->ij", A, B)
    torch.testing.assert_close(C.to_dense(), d * d)


def test_transposed_pattern_is_taken_over():
    """A pattern operand the kernel transposes for its run (not pretransposed by the Python
    layer) gives the output the transposed copy's arrays, which the copy hands over."""
    d = _dense(35, 28, 0.2, seed=5)
    A = scorch.to_sparse(d, "csc")
    U, V = torch.rand(35, 8, dtype=torch.float64), torch.rand(28, 8, dtype=torch.float64)
    S = scorch.einsum("ij,ik,jk->ij", A, U, V, out_format="csr")
    assert S.format.name == "csr"
    torch.testing.assert_close(S.to_dense(), d * (U @ V.T))
    assert not _same_memory(S._crd[1], A._crd[1])


def test_one_array_given_as_two_levels_coordinates():
    """A coo whose two levels' crd are one tensor: a result sharing the pattern took the
    first level's pos for the singleton level (matched by the crd array alone), and the
    next operation refused it ("level 1 (singleton) has no pos array")."""
    i = torch.tensor([0, 1], dtype=torch.int32)
    A = scorch.from_components((2, 2), "coo", pos=[torch.tensor([0, 2], dtype=torch.int32), None],
                               crd=[i, i], values=torch.tensor([1.0, 2.0]))
    R = A * torch.full((2, 2), 3.0)
    assert R._pos[1] is None
    assert torch.equal(R.to_dense(), torch.diag(torch.tensor([3.0, 6.0])))
    assert torch.equal((R * torch.ones(2, 2)).to_dense(), R.to_dense())
