"""An operand whose top level has repeated coordinates (COO's rows) keeps the outermost
loop on one thread: the automatic schedule converts it to unique coordinates (COO to
DCSR, duplicates summed) so that loop runs in parallel, and the Python layer makes that
copy once and keeps it on the tensor, as it does for a transposed one.  Checked: the
schedule and the explanation, results against dense over f32/f64, int32/int64 indices,
duplicates, empty, 1x1, all-zero and rectangular inputs, a third-order COO, the copy's
life (kept while the values are unchanged, remade after an in-place change), the caller's
arrays untouched, the C driver's own per-run conversion, and a parallel(...) the caller
writes still refused."""
import numpy as np
import pytest
import torch

import scorch
from scorch import _compiler
from conftest import make_dense

CONVERTED = "  converted before running to dcsr = cc (0,1)"


def lines(text, start):
    return [l for l in text.splitlines() if l.startswith(start)]


def coo_with_duplicates(shape, dtype, it, seed):
    """A COO SparseTensor whose entries repeat coordinates (split values), and its dense."""
    d = make_dense(shape, dtype=dtype, seed=seed, kind="empty_rows" if 0 not in shape else "random")
    nz = d.nonzero()
    vals = d[nz[:, 0], nz[:, 1]].clone()
    repeat = vals[::2] * 0.25                               # every other entry twice:
    vals[::2] -= repeat                                     # its two parts sum to d's value
    nz, v = torch.cat([nz, nz[::2]]), torch.cat([vals, repeat])
    order = torch.argsort(nz[:, 0] * max(shape[1], 1) + nz[:, 1], stable=True)
    nz, v = nz[order].to(it), v[order]                      # sorted, the repeats adjacent
    A = scorch.from_components(shape, "coo", pos=[torch.tensor([0, len(v)], dtype=it), None],
                               crd=[nz[:, 0].contiguous(), nz[:, 1].contiguous()], values=v)
    assert A.nnz == len(v) and (len(v) == 0 or A.nnz > len(d.nonzero()))
    return A, d


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("it", [torch.int32, torch.int64])
@pytest.mark.parametrize("shape", [(37, 29), (1, 1), (0, 5), (6, 0), (64, 3)])
def test_spmv_spmm_over_coo_run_in_parallel(dtype, it, shape):
    A, d = coo_with_duplicates(shape, dtype, it, seed=sum(shape) + (dtype == torch.float64))
    g = torch.Generator().manual_seed(5)
    x = torch.rand(shape[1], generator=g, dtype=dtype)
    X = torch.rand(shape[1], 20, generator=g, dtype=dtype)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    for expr, b, ref in [("ij,j->i", x, d @ x), ("ij,jk->ik", X, d @ X)]:
        text = scorch.explain(expr, A, b)
        if A.nnz:
            assert lines(text, "  converted before running to dcsr")
            assert lines(text, "schedule:")[0].endswith("parallel(i)")
        torch.testing.assert_close(scorch.einsum(expr, A, b), ref, **tol)
    torch.testing.assert_close(A @ X, d @ X, **tol)
    torch.testing.assert_close(torch.mv(A, x), d @ x, **tol)


def test_all_zero_and_explicit_zeros():
    z = torch.zeros(5, 4)
    A = scorch.to_sparse(torch.sparse_coo_tensor(torch.tensor([[1, 1, 3], [0, 0, 2]]),
                                                 torch.tensor([0.0, 0.0, 0.0]), (5, 4)), "coo")
    x = torch.rand(4)
    torch.testing.assert_close(A @ x, z @ x)
    B = scorch.to_sparse(z, "coo")
    torch.testing.assert_close(B @ x, z @ x)


def test_copy_kept_until_values_change_and_caller_untouched():
    A, d = coo_with_duplicates((40, 30), torch.float64, torch.int32, seed=7)
    vals = A.values().clone()
    crd0 = [c.copy() for c in A._arrays()[1] if c is not None]
    X = torch.rand(30, 8, dtype=torch.float64)
    torch.testing.assert_close(A @ X, d @ X)
    (fmt, (_, copy, _)), = A._transposed.items()
    assert fmt.name == "dcsr" and copy.nnz < A.nnz               # duplicates summed
    torch.testing.assert_close(A @ X, d @ X)
    assert A._transposed[fmt][1] is copy                          # warm: the same copy
    assert A.format.name == "coo" and torch.equal(A.values(), vals)
    assert all(np.array_equal(a, b) for a, b in
               zip([c for c in A._arrays()[1] if c is not None], crd0))
    A.values().mul_(3)                                            # in place: a new version
    torch.testing.assert_close(A @ X, 3 * d @ X)
    assert A._transposed[fmt][1] is not copy


def test_third_order_coo():
    d = make_dense((9, 7, 5), dtype=torch.float64, seed=11, kind="random")
    A = scorch.to_sparse(d, "coo")
    v = torch.rand(5, dtype=torch.float64)
    text = scorch.explain("ijk,k->ij", A, v)
    moved = [l for l in text.splitlines() if " before running to " in l]
    assert len(moved) == 1 and "nonunique" not in moved[0]      # csf, or a transposed ccc
    assert lines(text, "schedule:")[0].endswith("parallel(i)")
    torch.testing.assert_close(scorch.einsum("ijk,k->ij", A, v), d @ v)


def test_driver_converts_on_each_run_when_not_pre_converted():
    """The kernel as compiled (no Python copy): the C driver converts before the run."""
    A, d = coo_with_duplicates((50, 40), torch.float32, torch.int32, seed=13)
    x = torch.rand(40, generator=torch.Generator().manual_seed(13))
    entry, descs, _ = _compiler._compile(_compiler._LANG_EINSUM, "ij,j->i", (A, x), None, None,
                                      False)
    assert lines(_compiler._C.kernel_info(entry[0])[5], CONVERTED)
    # (f32 sums of a few terms up to 8 in size, added in another order than torch's)
    torch.testing.assert_close(_compiler._run(entry, descs), d @ x, rtol=1e-4, atol=1e-4)
    assert A._transposed is None


def test_written_schedules_are_as_asked():
    A, d = coo_with_duplicates((20, 10), torch.float64, torch.int32, seed=17)
    x = torch.rand(10, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"parallel\(i\) is illegal.*non-unique"):
        scorch.einsum("ij,j->i", A, x, schedule="order(i,j) parallel(i)")
    text = scorch.explain("ij,j->i", A, x, schedule="order(i,j)")   # parallel left to it
    assert lines(text, CONVERTED)
    torch.testing.assert_close(scorch.einsum("ij,j->i", A, x, schedule="order(i,j)"), d @ x)


def test_sparse_output_over_coo_is_not_converted():
    """A COO output's first level is compressed: no parallel loop, so nothing to gain."""
    d = make_dense((8, 6), dtype=torch.float64, seed=19, kind="random")
    A = scorch.to_sparse(d, "coo")
    text = scorch.explain("ij,ij->ij", A, A)
    assert not lines(text, "  converted before running")
    torch.testing.assert_close(scorch.einsum("ij,ij->ij", A, A).to_dense(), d * d)
