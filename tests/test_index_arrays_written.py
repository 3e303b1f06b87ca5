"""A SparseTensor's index arrays are checked once (at from_components) or made valid by
scorch, and never re-read for validity by its kernels.  Written in place afterwards
(through ``A.col_indices()``, ``A.indices()``, or the caller's own arrays handed to
from_components, which keeps them without a copy), a kernel or a conversion would read
out of bounds: a robustness hunt crashed the process so.  Every route that hands the
arrays to C code (the kernels' hot route in the extension, the general route, to_dense
and conversions) now refuses them by name; the public constructor checks what it is
given as from_components does.
"""
import copy
import io
import pickle

import pytest
import torch

import scorch

WRITTEN = "was written in place after it was made"


def _matrix():
    return scorch.to_sparse(torch.tensor([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]]), "csr")


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("how", ["col_indices", "crow_indices", "indices"])
def test_written_arrays_are_refused_everywhere(how, warm):
    A = _matrix()
    X = torch.ones(3, 2)
    B, C = A.t(), A * 2
    if warm:   # (the extension's hot route, a remembered kernel on a prepared operand)
        for _ in range(3):
            A @ X, B @ X, C @ X
    array = {"col_indices": A.col_indices, "crow_indices": A.crow_indices,
             "indices": lambda: A.indices(1)[1]}[how]()
    array[0] = array[0] + 1 if how == "crow_indices" else 10 ** 8
    for call in (lambda: A @ X, lambda: B @ X, lambda: C @ X, lambda: torch.mv(A, X[:, 0]),
                 lambda: A.to_dense(), lambda: A.to_format("csc"), lambda: A @ A,
                 lambda: scorch.einsum("ij,jk->ik", A, X), lambda: A.sum(1),
                 lambda: A.with_values(A.values() * 3) @ X, lambda: A.clone(),
                 lambda: copy.deepcopy(A), lambda: torch.cat([A, A]), lambda: A[0],
                 lambda: A.reshape(9, 1), lambda: A * 2):
        with pytest.raises(ValueError, match=WRITTEN):
            call()


def test_the_callers_arrays_given_to_from_components():
    pos = torch.tensor([0, 2, 3], dtype=torch.int32)
    crd = torch.tensor([0, 2, 1], dtype=torch.int32)
    A = scorch.from_components((2, 3), "csr", pos=[None, pos], crd=[None, crd],
                               values=torch.tensor([1.0, 2.0, 3.0]))
    X = torch.ones(3, 2)
    assert (A @ X).tolist() == [[3.0, 3.0], [3.0, 3.0]]
    crd[1] = 2_000_000_000
    with pytest.raises(ValueError, match=r"crd of level 1\) " + WRITTEN):
        A @ X
    crd[1] = 2   # (the same contents again: still a write since the check)
    with pytest.raises(ValueError, match=WRITTEN):
        A @ X
    # checked again, the arrays serve a new tensor; the old one stays refused
    B = scorch.from_components((2, 3), "csr", pos=[None, pos], crd=[None, crd],
                               values=torch.tensor([1.0, 2.0, 3.0]))
    assert (B @ X).tolist() == [[3.0, 3.0], [3.0, 3.0]]
    with pytest.raises(ValueError, match=WRITTEN):
        A @ X


def test_public_constructor_checks_its_arrays():
    good_pos = torch.tensor([0, 2, 3])
    with pytest.raises(IndexError, match="coordinate out of range"):
        scorch.SparseTensor((2, 3), scorch.Format.parse("csr", 2), [None, good_pos],
                            [None, torch.tensor([2, 100_000_000, 0])], torch.ones(3))
    A = scorch.SparseTensor((2, 3), "csr", [None, good_pos], [None, torch.tensor([0, 2, 1])],
                            torch.tensor([1.0, 2.0, 3.0]), requires_grad=True)
    assert A.requires_grad and A.to_dense().tolist() == [[1.0, 0, 2.0], [0, 3.0, 0]]
    assert A.index_dtype == torch.int64
    # (index_dtype= keeps the pattern entry for entry: a coo's repeated coordinates too)
    C = scorch.SparseTensor((2, 3), "coo", [torch.tensor([0, 3]), None],
                            [torch.tensor([0, 0, 1]), torch.tensor([1, 1, 2])],
                            torch.tensor([1.0, 2.0, 3.0]), index_dtype=torch.int32)
    assert C.index_dtype == torch.int32 and C.values().tolist() == [1.0, 2.0, 3.0]
    for it in (torch.int32, torch.int64):   # (index_dtype= kept, a dense format's too)
        D = scorch.SparseTensor((2, 3), "dense", [None, None], [None, None],
                                torch.arange(6.0), index_dtype=it)
        assert D.index_dtype == it and D.to_dense().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_arrays_save_copy_and_pickle_as_plain_tensors():
    """The record of an array's version lives on the SparseTensor, not on the array: its
    torch.save loads with weights_only, and copies of a tensor work as the original."""
    A = _matrix()
    X = torch.ones(3, 2)
    buf = io.BytesIO()
    torch.save(A.crow_indices(), buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf, weights_only=True), A.crow_indices())
    for B in (copy.deepcopy(A), pickle.loads(pickle.dumps(A)), A.clone()):
        assert torch.equal(B @ X, A @ X)
        B.col_indices()[0] = 10 ** 8
        with pytest.raises(ValueError, match=WRITTEN):
            B @ X
    assert torch.equal(A @ X, _matrix() @ X)   # (A's own arrays were not written)


def test_sparse_linear_buffers_loaded_in_place_still_run():
    """load_state_dict writes a SparseLinear's index buffers in place: the layer checks
    them (from_components) and its weight runs on them."""
    torch.manual_seed(0)
    a = scorch.nn.SparseLinear(16, 4, density=0.5)
    b = scorch.nn.SparseLinear(16, 4, density=0.5)
    x = torch.randn(3, 16)
    a(x)
    a.load_state_dict(b.state_dict())
    torch.testing.assert_close(a(x), b(x))


def test_holes_a_review_found_are_closed():
    """Routes that took a written array past the check: a keyword argument, a sparse
    result's pattern rebuilt for the backward, to_torch / to_scipy, indices() without a
    level; and copy_ of another pattern, which kept the old record (a valid copy_ was
    then refused)."""
    X = torch.ones(3, 2)
    A = _matrix()
    A.col_indices()[0] = 10 ** 8
    for call in (lambda: torch.narrow(input=A, dim=0, start=0, length=2),
                 lambda: torch.select(input=A, dim=0, index=0), lambda: A.to_torch(),
                 lambda: A.to_scipy(), lambda: A.indices()):
        with pytest.raises(ValueError, match=WRITTEN):
            call()
    # a sparse result's pattern, written before its backward
    A, B = _matrix().requires_grad_(), _matrix()
    Y = A @ B
    Y.col_indices()[0] = 10 ** 8
    with pytest.raises(ValueError, match=WRITTEN):
        Y.values().sum().backward()
    # copy_ of another pattern takes the new arrays' record: a tensor on arrays filled in
    # place before from_components (versions past 0) was refused after a valid copy_
    pos = torch.zeros(4, dtype=torch.int32)
    pos.copy_(torch.tensor([0, 1, 2, 3]))
    crd = torch.empty(3, dtype=torch.int32)
    crd.copy_(torch.tensor([2, 0, 1]))
    dst = scorch.from_components((3, 3), "csr", pos=[None, pos], crd=[None, crd],
                                 values=torch.tensor([1.0, 2.0, 3.0]))
    src = _matrix()
    with torch.no_grad():
        dst.copy_(src)
    assert torch.equal(dst @ X, src.to_dense() @ X)
    crd[0] = 10 ** 8                   # (dst's old arrays: no longer its own)
    assert torch.equal(dst @ X, src.to_dense() @ X)
    dst.col_indices()[0] = 10 ** 8     # (its new ones)
    with pytest.raises(ValueError, match=WRITTEN):
        dst @ X
