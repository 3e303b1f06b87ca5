"""One negative test per illegal input: the exception class and a key phrase of its message.

Bad input must give a clear Python exception, never a crash or a wrong answer, and must
never modify the caller's tensors.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

import scorch
from scorch import Format

from conftest import make_dense, seed_of

I32 = torch.int32
I64 = torch.int64


def i32(*a):
    return torch.tensor(a, dtype=I32)


def f32(*a):
    return torch.tensor(a, dtype=torch.float32)


@pytest.fixture
def x():
    return make_dense((4, 5), torch.float32, seed_of("errors"))


def csr(shape=(2, 3), pos=(0, 1, 2), crd=(0, 1), values=(1.0, 2.0), it=I32, **kw):
    """from_components for a CSR built from plain tuples (each overridable)."""
    p = pos if isinstance(pos, torch.Tensor) else torch.tensor(pos, dtype=it)
    c = crd if isinstance(crd, torch.Tensor) else torch.tensor(crd, dtype=it)
    v = values if isinstance(values, torch.Tensor) else torch.tensor(values)
    return scorch.from_components(shape, "csr", pos=[None, p], crd=[None, c], values=v, **kw)


# ---- formats ----------------------------------------------------------------------------

def test_unknown_format_name(x):
    with pytest.raises(ValueError, match=r"invalid format 'foo'.*expected a name"):
        scorch.to_sparse(x, "foo")


def test_bad_level_letter(x):
    with pytest.raises(ValueError, match=r"invalid format 'dx': unknown level letter at "
                                         r"column 1"):
        scorch.to_sparse(x, "dx")


def test_bad_level_letter_in_format_constructor():
    with pytest.raises(ValueError, match="unknown level letter"):
        Format("dq")


def test_format_not_a_string(x):
    with pytest.raises(TypeError, match="format must be a str or scorch.Format"):
        scorch.to_sparse(x, 3)


@pytest.mark.parametrize("fmt", ["csr", "csc", "dcsr", "dcsc"])
def test_two_d_only_format_on_a_3d_tensor(fmt):
    with pytest.raises(ValueError, match=f"format '{fmt}' is for 2-D tensors, got a 3-D"):
        scorch.to_sparse(torch.ones(2, 2, 2), fmt)


def test_two_d_format_object_on_a_3d_tensor():
    with pytest.raises(ValueError, match="has 2 levels but the tensor has 3 dimensions"):
        scorch.to_sparse(torch.ones(2, 2, 2), Format("dc", order=(1, 0)))


def test_too_many_levels(x):
    with pytest.raises(ValueError, match="more levels than dimensions"):
        scorch.to_sparse(x, "dcc")


def test_too_few_levels():
    with pytest.raises(ValueError, match="levels"):
        scorch.to_sparse(torch.ones(2, 2, 2), "dc")


def test_wrong_number_of_levels_format_object(x):
    with pytest.raises(ValueError, match="has 3 levels but the tensor has 2 dimensions"):
        scorch.to_sparse(x, Format("dcc"))


def test_singleton_level_at_the_top(x):
    with pytest.raises(ValueError, match="level 0: a singleton level needs a compressed or "
                                         "singleton level above it"):
        scorch.to_sparse(x, "sc")


def test_singleton_level_under_dense(x):
    with pytest.raises(ValueError, match="level 1: a singleton level needs a compressed or "
                                         "singleton level above it"):
        scorch.to_sparse(x, "ds")


def test_singleton_level_in_format_constructor():
    with pytest.raises(ValueError, match="singleton level needs"):
        Format("sc")


def test_format_order_not_a_permutation():
    with pytest.raises(ValueError, match=r"order \(0, 0\) is not a permutation"):
        Format("dc", order=(0, 0))


def test_singleton_under_unique_level_cannot_hold_two_entries_of_a_parent():
    x = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])   # row 0 has two entries
    with pytest.raises(NotImplementedError, match="singleton level sits under a unique "
                                                  "level"):
        scorch.to_sparse(x, "cs")
    A = scorch.to_sparse(x, "coo")
    with pytest.raises(NotImplementedError, match="make the level above it nonunique"):
        A.to_format("cs")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unique_singleton_cannot_hold_two_entries_equal_through_it(dtype):
    """c(nonunique)ss: level 1 is a unique singleton, so no two entries may share (i, j);
    kernels trust that.  Data with such a pair is refused from dense, from another format
    and through to_format; data without one converts and computes as dense does."""
    x = torch.zeros(2, 2, 3, dtype=dtype)
    x[0, 0, 0], x[0, 0, 1], x[1, 1, 2] = 1, 2, 3                # (0, 0) twice
    for make in (lambda: scorch.to_sparse(x, "c(nonunique)ss"),
                 lambda: scorch.to_sparse(x, "csf").to_format("c(nonunique)ss"),
                 lambda: scorch.to_sparse(x.to_sparse(), "c(nonunique)ss")):
        with pytest.raises(NotImplementedError, match="same coordinates through level 1: "
                                                      "that singleton level is unique"):
            make()
    A = scorch.to_sparse(x, "c(nonunique)s(nonunique)s")
    B = scorch.to_sparse(x, "csf")
    assert scorch.einsum("ijk,ijk->", A, B).item() == (x * x).sum().item()
    y = torch.zeros(2, 2, 3, dtype=dtype)
    y[0, 0, 0], y[0, 1, 1], y[1, 1, 2] = 1, 2, 3                # every (i, j) once
    C = scorch.to_sparse(y, "c(nonunique)ss")
    torch.testing.assert_close(C.to_dense(), y)
    torch.testing.assert_close((C * scorch.to_sparse(y, "csf")).to_dense(), y * y)
    assert scorch.einsum("ijk,ijk->", C, scorch.to_sparse(y, "csf")).item() == (y * y).sum().item()


def test_zero_dim_tensor():
    with pytest.raises(ValueError, match="at least one dimension"):
        scorch.to_sparse(torch.tensor(1.0), "dense")


# ---- from_components --------------------------------------------------------------------

def test_from_components_crd_out_of_range():
    with pytest.raises(IndexError, match="level 1: coordinate out of range"):
        csr(crd=(0, 3))


def test_from_components_negative_crd():
    with pytest.raises(IndexError, match="level 1: coordinate out of range"):
        csr(crd=(-1, 1))


def test_from_components_unsorted_crd_in_a_unique_level():
    with pytest.raises(ValueError, match="level 1: coordinates not strictly increasing"):
        csr(pos=(0, 2, 2), crd=(2, 0))


def test_from_components_duplicate_crd_in_a_unique_level():
    with pytest.raises(ValueError, match="level 1: coordinates not strictly increasing"):
        csr(pos=(0, 2, 2), crd=(1, 1))


def test_from_components_unsorted_top_level_of_coo():
    it = I32
    with pytest.raises(ValueError, match="level 0: coordinates not sorted"):
        scorch.from_components((2, 3), "coo", pos=[i32(0, 2), None],
                               crd=[torch.tensor([1, 0], dtype=it),
                                    torch.tensor([0, 1], dtype=it)],
                               values=f32(1, 2))


def test_from_components_decreasing_pos():
    with pytest.raises(ValueError, match="level 1: pos array decreases"):
        csr(shape=(3, 3), pos=(0, 2, 1, 2), crd=(0, 1))


def test_from_components_pos_not_starting_at_zero():
    with pytest.raises(ValueError, match="level 1: pos array must start at 0"):
        csr(pos=(1, 1, 2))


def test_from_components_pos_last_not_crd_length():
    with pytest.raises(ValueError, match=r"level 1: pos\[2\] = 1 but crd has length 2"):
        csr(pos=(0, 1, 1))


def test_from_components_wrong_pos_length():
    with pytest.raises(ValueError, match="level 1: pos array has length 2, expected 3"):
        csr(pos=(0, 2))


def test_from_components_values_length_mismatch():
    with pytest.raises(ValueError, match="values has length 3, expected 2"):
        csr(values=(1.0, 2.0, 3.0))


def test_from_components_values_not_1d():
    with pytest.raises(ValueError, match="values must be 1-D"):
        csr(values=torch.ones(2, 1))


def test_from_components_bool_values():
    with pytest.raises(TypeError, match="int8 or uint8 values, got torch.bool"):
        csr(values=torch.ones(2, dtype=torch.bool))


def test_from_components_mixed_index_dtypes():
    with pytest.raises(TypeError, match="all index arrays must share one dtype"):
        csr(pos=i32(0, 1, 2), crd=torch.tensor([0, 1], dtype=I64))


def test_from_components_float_index_arrays():
    with pytest.raises(TypeError,
                       match=r"pos\[1\] must be int32 or int64, got torch.float32"):
        csr(pos=f32(0, 1, 2), crd=f32(0, 1))


def test_from_components_numpy_index_array():
    with pytest.raises(TypeError, match=r"pos\[1\] must be a torch.Tensor, not ndarray"):
        scorch.from_components((2, 3), "csr", pos=[None, np.array([0, 1, 2], dtype=np.int32)],
                               crd=[None, i32(0, 1)], values=f32(1, 2))


def test_from_components_missing_pos_for_compressed_level():
    with pytest.raises(ValueError, match=r"level 1 \(compressed\) needs a pos array"):
        scorch.from_components((2, 3), "csr", pos=[None, None], crd=[None, i32(0, 1)],
                               values=f32(1, 2))


def test_from_components_missing_crd_for_singleton_level():
    with pytest.raises(ValueError, match=r"level 1 \(singleton\) needs a crd array"):
        scorch.from_components((2, 3), "coo", pos=[i32(0, 2), None], crd=[i32(0, 1), None],
                               values=f32(1, 2))


def test_from_components_pos_for_dense_level():
    with pytest.raises(ValueError, match=r"level 0 \(dense\) has no pos array; pass None"):
        scorch.from_components((2, 3), "csr", pos=[i32(0, 2), i32(0, 1, 2)],
                               crd=[None, i32(0, 1)], values=f32(1, 2))


def test_from_components_pos_for_singleton_level():
    with pytest.raises(ValueError, match=r"level 1 \(singleton\) has no pos array"):
        scorch.from_components((2, 3), "coo", pos=[i32(0, 2), i32(0, 1, 2)],
                               crd=[i32(0, 1), i32(0, 1)], values=f32(1, 2))


def test_from_components_wrong_number_of_level_arrays():
    with pytest.raises(ValueError, match=r"pos and crd need one entry per level \(2\)"):
        scorch.from_components((2, 3), "csr", pos=[i32(0, 1, 2)], crd=[None, i32(0, 1)],
                               values=f32(1, 2))


def test_from_components_negative_shape():
    with pytest.raises(ValueError, match="negative size -1 in dimension 0"):
        csr(shape=(-1, 3), pos=(0,), crd=(), values=torch.zeros(0))


def test_from_components_shape_not_a_tuple():
    with pytest.raises(TypeError, match="shape must be a tuple of ints"):
        csr(shape="ab")


def test_from_components_never_writes_the_callers_arrays():
    pos, crd, vals = i32(0, 2, 2), i32(2, 0), f32(1, 2)   # unsorted: refused
    before = pos.clone(), crd.clone(), vals.clone()
    with pytest.raises(ValueError, match="not strictly increasing"):
        csr(pos=pos, crd=crd, values=vals)
    assert all(torch.equal(a, b) for a, b in zip((pos, crd, vals), before))


# ---- to_sparse ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64, torch.uint16], ids=str)
def test_to_sparse_unsupported_value_dtype(dtype):
    with pytest.raises(TypeError, match=f"int8 or uint8 values, got {dtype}"):
        scorch.to_sparse(torch.ones(2, 2, dtype=dtype), "csr")


def test_to_sparse_unsupported_value_dtype_torch_sparse():
    with pytest.raises(TypeError, match="int8 or uint8 values, got torch.bool"):
        scorch.to_sparse(torch.ones(2, 2, dtype=torch.bool).to_sparse(), "csr")


def test_to_sparse_unsupported_value_dtype_scipy():
    with pytest.raises(TypeError, match="int8 and uint8 scipy values, got uint16"):
        scorch.to_sparse(sp.csr_array(np.ones((2, 2), dtype=np.uint16)), "csr")


def test_to_sparse_unsupported_value_dtype_numpy():
    with pytest.raises(TypeError, match="int8 or uint8 values, got torch.bool"):
        scorch.to_sparse(np.ones((2, 2), dtype=np.bool_), "csr")


@pytest.mark.parametrize("obj", [[[1.0, 2.0]], 3.0, "csr", None], ids=repr)
def test_to_sparse_not_a_tensor(obj):
    with pytest.raises(TypeError, match="to_sparse expects a torch.Tensor"):
        scorch.to_sparse(obj, "csr")


def test_to_sparse_non_cpu_device():
    with pytest.raises(ValueError, match="the input is on meta"):
        scorch.to_sparse(torch.empty(2, 2, device="meta"), "csr")


def test_to_sparse_hybrid_coo():
    with pytest.raises(NotImplementedError, match="hybrid COO"):
        scorch.to_sparse(torch.ones(2, 2, 3).to_sparse(2), "csr")


def test_to_sparse_int32_cannot_hold_a_dimension():
    n = 2**31 + 5
    idx = torch.tensor([[0, 0], [1, n - 1]])
    vals = f32(1, 2)
    x = torch.sparse_coo_tensor(idx, vals, (1, n), check_invariants=True)
    with pytest.raises(ValueError, match=r"does not fit int32 indices \(use int64\)"):
        scorch.to_sparse(x, "csr", index_dtype=torch.int32)
    # The input is not modified by a refused conversion.
    assert torch.equal(x._indices(), idx) and torch.equal(x._values(), vals)
    assert x.shape == (1, n)


def test_arrays_too_large_for_memory_are_refused():
    """A level whose arrays' byte count overflows (a row array of 2^62 + 1 int64s) is out of
    memory, not a small block written past its end."""
    def coo(rows):
        return torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, 0]]), f32(1, 2), (rows, 1))
    with pytest.raises(MemoryError, match="overflows"):
        scorch.to_sparse(coo(2**62), "csr")
    with pytest.raises(MemoryError, match="overflows"):
        scorch.from_edge_index(torch.tensor([[0, 1], [1, 0]]), num_nodes=2**62)
    D = scorch.to_sparse(coo(2**61), "dcsr")  # two stored rows: fits
    with pytest.raises(MemoryError, match="overflows"):
        D.to_format("csr")
    assert D.to_format("coo").nnz == 2


@pytest.mark.parametrize("index_dtype", [torch.float32, torch.int16, "int32", 32], ids=str)
def test_to_sparse_bad_index_dtype(x, index_dtype):
    with pytest.raises(TypeError, match="index_dtype must be torch.int32 or torch.int64"):
        scorch.to_sparse(x, "csr", index_dtype=index_dtype)


def test_to_format_bad_index_dtype(x):
    with pytest.raises(TypeError, match="index_dtype must be torch.int32 or torch.int64"):
        scorch.to_sparse(x, "csr").to_format("csc", index_dtype=torch.float64)


def test_to_torch_bad_layout(x):
    with pytest.raises(ValueError, match="to_torch supports sparse_coo, sparse_csr and "
                                         "sparse_csc, not torch.strided"):
        scorch.to_sparse(x, "csr").to_torch(layout=torch.strided)


def test_input_is_not_modified_by_a_refused_conversion(x):
    before = x.clone()
    with pytest.raises(ValueError, match="unknown level letter"):
        scorch.to_sparse(x, "dz")
    with pytest.raises(ValueError, match="singleton level needs"):
        scorch.to_sparse(x, "sc")
    assert torch.equal(x, before)


# ---- from_edge_index --------------------------------------------------------------------

def test_from_edge_index_wrong_shape():
    with pytest.raises(ValueError,
                       match=r"edge_index must have shape \[2, E\], got \[3, 4\]"):
        scorch.from_edge_index(torch.zeros(3, 4, dtype=torch.int64))


def test_from_edge_index_one_dimensional():
    with pytest.raises(ValueError, match=r"edge_index must have shape \[2, E\]"):
        scorch.from_edge_index(torch.zeros(4, dtype=torch.int64))


def test_from_edge_index_float():
    with pytest.raises(TypeError, match="edge_index must be an integer tensor, got "
                                        "torch.float32"):
        scorch.from_edge_index(torch.zeros(2, 4))


def test_from_edge_index_node_out_of_range():
    with pytest.raises(IndexError, match="index 5 of entry 1 is out of range for dimension 0 "
                                         "of size 3"):
        scorch.from_edge_index(torch.tensor([[0, 5], [1, 1]]), num_nodes=3)


def test_from_edge_index_negative_node():
    with pytest.raises(IndexError, match="index -1 of entry 1 is out of range"):
        scorch.from_edge_index(torch.tensor([[0, -1], [1, 1]]))


def test_from_edge_index_negative_num_nodes():
    with pytest.raises(ValueError, match="num_nodes must be non-negative, got -2"):
        scorch.from_edge_index(torch.tensor([[0, 1], [1, 1]]), num_nodes=-2)


def test_from_edge_index_values_wrong_length():
    with pytest.raises(ValueError, match=r"values must have shape \[2\] \(one per edge\), "
                                         r"got \[3\]"):
        scorch.from_edge_index(torch.tensor([[0, 1], [1, 1]]), values=torch.ones(3))


def test_from_edge_index_bool_values():
    with pytest.raises(TypeError, match="int8 or uint8 values, got torch.bool"):
        scorch.from_edge_index(torch.tensor([[0], [1]]),
                               values=torch.tensor([1], dtype=torch.bool))


def test_from_edge_index_does_not_modify_its_inputs():
    ei = torch.tensor([[0, 7], [1, 1]])
    vals = f32(1, 2)
    before = ei.clone(), vals.clone()
    with pytest.raises(IndexError, match="out of range"):
        scorch.from_edge_index(ei, num_nodes=3, values=vals)
    assert torch.equal(ei, before[0]) and torch.equal(vals, before[1])


# ---- SparseTensor methods -----------------------------------------------------------------

def test_with_values_wrong_shape(x):
    A = scorch.to_sparse(x, "csr")
    with pytest.raises(ValueError, match=rf"values must have shape \({A.nnz},\)"):
        A.with_values(torch.ones(A.nnz + 1))


def test_with_values_wrong_dtype(x):
    A = scorch.to_sparse(x, "csr")
    with pytest.raises(TypeError, match="values must be float32, float64, bfloat16, float16, "
                                        "int64, int32, int16, int8 or uint8"):
        A.with_values(torch.ones(A.nnz, dtype=torch.bool))


def test_with_values_not_a_tensor(x):
    A = scorch.to_sparse(x, "csr")
    with pytest.raises(TypeError, match="values must be a torch.Tensor"):
        A.with_values([1.0] * A.nnz)


def test_indices_level_out_of_range(x):
    with pytest.raises(IndexError, match="level 2 is out of range for a 2-level tensor"):
        scorch.to_sparse(x, "csr").indices(2)


@pytest.mark.parametrize("op", [
    pytest.param(lambda A: torch.exp(A), id="torch.exp"),
    pytest.param(lambda A: A.exp(), id="Tensor.exp"),
    pytest.param(lambda A: A + 1, id="add_scalar"),
    pytest.param(lambda A: torch.cos(A), id="torch.cos"),
])
@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_unsupported_torch_op(x, fmt, op):
    A = scorch.to_sparse(x, fmt)
    with pytest.raises(NotImplementedError, match=rf"not supported on SparseTensor "
                                                  rf"\(formats: {fmt}\).*\.to_dense\(\)"):
        op(A)
    assert torch.equal(A.to_dense(), x)


def test_result_with_more_elements_than_int64_counts():
    # Four entries, but a shape of 66000^4 elements: torch cannot describe such a tensor.
    t = torch.sparse_coo_tensor(torch.tensor([[0, 65000], [3, 65000]]), torch.tensor([1., 2.]),
                                (66000, 66000))
    A = scorch.to_sparse(t, "coo")
    with pytest.raises(ValueError, match="more than 2\\^63 - 1 elements"):
        scorch.einsum("ij,kl->ijkl", A, A)
    with pytest.raises(ValueError, match="more than 2\\^63 - 1 elements"):
        scorch.from_components((66000,) * 4, "coo", pos=[torch.tensor([0, 1]), None, None, None],
                               crd=[torch.zeros(1, dtype=torch.int64)] * 4,
                               values=torch.ones(1))


def test_sizes_and_edge_index_must_be_integers():
    ei = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(TypeError, match="not an integer"):
        scorch.from_components((2.9, 3), "csr", pos=[None, torch.tensor([0, 1, 2])],
                               crd=[None, torch.tensor([0, 2])], values=torch.ones(2))
    with pytest.raises(TypeError, match="not an integer"):
        scorch.from_edge_index(ei, 2.5)
    for dt in (torch.complex64, torch.complex128, torch.float32, torch.bool):
        with pytest.raises(TypeError, match="integer tensor"):
            scorch.from_edge_index(ei.to(dt), 2)
    assert scorch.from_edge_index(ei, np.int64(3)).shape == (3, 3)
    assert scorch.from_edge_index(ei, torch.tensor(3)).shape == (3, 3)


def test_an_in_place_write_with_other_entries_is_refused_by_name():
    """An in-place op whose result has other entries than the tensor is refused, naming
    the op and what works (an optimizer's step on a sparse parameter goes through its
    values: tests/test_optim.py)."""
    A = scorch.to_sparse(torch.eye(3), "csr")
    B = scorch.to_sparse(torch.ones(3, 3), "csr")
    with pytest.raises(NotImplementedError, match=r"addcmul_.*writes in place.*torch.optim"):
        A.addcmul_(B, B)
    with pytest.raises(NotImplementedError, match=r"lerp_.*keep the tensor's stored entries"):
        A.lerp_(B, 0.5)
    assert torch.equal(A.to_dense(), torch.eye(3))


def test_kernel_formats_are_matched_by_name():
    a = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    A, X = scorch.to_sparse(a, "csr"), torch.randn(3, 4)
    B = scorch.to_sparse(torch.randn(3, 4), "csc")
    for k in (scorch.kernel("C(i,k) = A(i,j) * B(j,k)", B="dense"),
              scorch.kernel("C(i,k) = A(i,j) * B(j,k)", B="dense", A="csr")):
        torch.testing.assert_close(k(A, X), a @ X)
    k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", B="csc", A="csr")
    torch.testing.assert_close(k(A, B).to_dense(), a @ B.to_dense())
    with pytest.raises(TypeError, match="operand B was declared csc but is dense"):
        k(A, X)
    with pytest.raises(ValueError, match="formats declared for Z"):
        scorch.kernel("C(i,k) = A(i,j) * B(j,k)", Z="csr")
    for bad in (5, ["csr"]):
        with pytest.raises(TypeError, match="out_format must be a str or scorch.Format"):
            scorch.einsum("ij->ij", A, out_format=bad)
        with pytest.raises(TypeError, match="out_format must be a str or scorch.Format"):
            scorch.kernel("C(i,j) = A(i,j)", out_format=bad)


def test_enabled_integer_addmm_casts_the_scalars_as_torch():
    A = torch.tensor([[1, 0], [0, 2]]).to_sparse()
    X, b = torch.tensor([[3, 4], [5, 6]]), torch.ones(2, 2, dtype=torch.long)
    for kw in (dict(alpha=0.5), dict(beta=0.5), dict(alpha=2.7, beta=1.9)):
        want = torch.addmm(b, A, X, **kw)
        with scorch.enabled():
            got = torch.addmm(b, A, X, **kw)
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_an_unknown_level_word_is_named():
    with pytest.raises(ValueError, match="unknown level 'densecompressed' at column 0"):
        Format("densecompressed")


@pytest.mark.parametrize("spec", ["compr, dense", "compresse,d", "c,singl(nonunique)",
                                  "dens,c"])
def test_a_level_name_is_whole(x, spec):
    """A level is a letter or its full name: a cut name is refused (it was taken for the
    level it begins), by to_sparse and by Format alike."""
    with pytest.raises(ValueError, match="unknown level"):
        scorch.to_sparse(x, spec)
    with pytest.raises(ValueError, match="unknown level"):
        Format(spec)


def test_format_levels_and_ndim_must_agree():
    assert Format("dc", ndim=2) == Format("csr", ndim=2)
    for spec in ("dc", "csr"):
        with pytest.raises(ValueError, match="has 2 levels, not ndim=3"):
            Format(spec, ndim=3)


def test_kernel_scalar_operand_advice_works():
    A = scorch.to_sparse(torch.tensor([[1., 0], [0, 3]]), "csr")
    with pytest.raises(ValueError, match=r"s\(k\) with a tensor of shape \(1,\)"):
        scorch.kernel("C(i,j) = s * A(i,j)")(torch.tensor(2.), A)
    r = scorch.kernel("C(i,j) = s(k) * A(i,j)")(torch.tensor([2.]), A)   # the advice
    torch.testing.assert_close(r.to_dense(), torch.tensor([[2., 0], [0, 6]]))


def test_explain_describes_and_checks_these_operands():
    """The kernel text is kept per kernel, which serves other sizes: explain gives these
    operands' entry counts and refuses sizes the call refuses."""
    A = scorch.to_sparse(torch.eye(4), "csr")
    B = scorch.to_sparse(torch.ones(5, 6), "csr")
    scorch.explain(torch.mv, A, torch.ones(4))
    lines = scorch.explain(torch.mv, B, torch.ones(6)).splitlines()
    assert "nnz 30" in lines[1] and "nnz 6" in lines[2]
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        scorch.explain(torch.mv, B, torch.ones(7))
    with pytest.raises(ValueError, match="size mismatch"):
        scorch.explain("ij,j->i", B, torch.ones(7))
    k = scorch.kernel("y(i) = A(i,j) * x(j)", A="csr")
    assert "nnz 30" in k.explain(B, torch.ones(6)).splitlines()[1]
    x = make_dense((60, 50), torch.float32, seed_of("explain-csc"), density=0.1)
    scorch.explain(torch.mm, scorch.to_sparse(x, "csc"), torch.ones(50, 8))
    C = scorch.to_sparse(x[:6, :5], "csc")
    lines = scorch.explain(torch.mm, C, torch.ones(5, 8)).splitlines()
    assert f"nnz {C.nnz}" in lines[1] and "transposed before running" in lines[2]
    assert lines[3].startswith("operand B") and "nnz 40" in lines[3]
    assert not lines[4].startswith("  ")           # (B read as given: no moved line)
    with pytest.raises(ValueError, match="size mismatch"):
        k.explain(B, torch.ones(7))


def test_small_api_corners():
    x = torch.tensor([[1., 0], [0, 3]])
    A = scorch.to_sparse(x, "csr")
    assert not A.is_shared()
    A.share_memory_()
    assert A.is_shared() and A.values().is_shared()
    with pytest.raises(NotImplementedError, match="masked_grad=False"):
        A.to_dense(masked_grad=False)
    assert torch.equal(A.to_dense(masked_grad=True), x)
    with pytest.raises(TypeError, match=r"operand 1 is a torch.sparse_csr tensor"):
        scorch.einsum("ij,jk->ik", A, x.to_sparse_csr())


def test_cli_options_are_checked():
    import subprocess
    import sys
    for args in (["--epochs", "0"], ["--repeat", "-2", "--convert"], ["--threads", "0"]):
        r = subprocess.run([sys.executable, "-m", "scorch", *args], capture_output=True,
                           text=True)
        assert r.returncode == 2 and "must be at least 1" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "scorch", "--help"], capture_output=True,
                       text=True, check=True)
    assert "--seed" in r.stdout


def test_a_malformed_cache_size_is_said():
    import os
    import subprocess
    import sys
    # (a count with a suffix over 2^40 bytes in all: it wrapped in the C core, to 0 or
    # a negative size or 9e18 bytes, unsaid)
    for value, warned in (("32MiB", True), ("-5", True), ("32M", False), ("1024G", False),
                          ("1025G", True), ("1099511627776G", True), ("8589934591G", True)):
        r = subprocess.run([sys.executable, "-c", "import scorch"], capture_output=True,
                           text=True, env={**os.environ, "SCORCH_CACHE_BYTES": value})
        assert ("SCORCH_CACHE_BYTES" in r.stderr) == warned, r.stderr


def test_output_too_large_to_address_is_refused_before_the_kernel_runs():
    """A dense output (or a sparse one's leading dense levels) whose element count
    overflows: a ValueError before the kernel runs (the count wrapped, and the kernel
    wrote past a small buffer: a segfault, or an abort handing it to torch)."""
    def vec(n, at):
        return scorch.to_sparse(torch.sparse_coo_tensor(torch.tensor([at]),
                                                        torch.tensor([1., 2.]), (n,)), "csf")
    v = vec(2 ** 32, [0, 2 ** 32 - 1])
    A = scorch.to_sparse(torch.sparse_coo_tensor(torch.tensor([[0, 65535], [0, 65535]]),
                                                 torch.tensor([1., 2.]), (65536, 65536)), "csr")
    B = scorch.to_sparse(torch.sparse_coo_tensor(torch.tensor([[0, 2 ** 32 - 1], [0, 0]]),
                                                 torch.tensor([1., 2.]), (2 ** 32, 1)), "dcsr")
    calls = [lambda: torch.einsum("ij,kl,->ijkl", A, A, torch.tensor(2.)),
             lambda: scorch.einsum("i,j->ij", v, v, out_format="dense"),
             lambda: torch.einsum("i,j,->ij", v, v, torch.tensor(2.)),
             lambda: torch.einsum("i,j,j->ij", v, v, torch.ones(1)),
             lambda: scorch.einsum("i,j,->ij", vec(2 ** 62 + 1, [0, 5]), torch.ones(4),
                                   torch.tensor(2.), out_format="dense"),
             lambda: scorch.einsum("ij,jk,l->ikl", B, B.t(), torch.ones(1), out_format="ddc")]
    for call in calls:
        with pytest.raises(ValueError, match="more elements than memory can address"):
            call()
    # (inferred, that outer product is sparse: 8 entries, in a shape torch cannot describe)
    with pytest.raises(ValueError, match="more than 2\\^63 - 1 elements"):
        scorch.einsum("i,j,->ij", vec(2 ** 62 + 1, [0, 5]), torch.ones(4), torch.tensor(2.))


def test_from_components_arrays_are_plain_tensors():
    """A sparse array (torch's or scorch's) is refused by name; a negated view is read as
    the values it shows (torch's numpy() refused its negative bit)."""
    pos, crd = torch.tensor([0, 2, 3]), torch.tensor([0, 2, 1])
    vals = torch.tensor([1., 2., 3.])
    for bad in (crd.to_sparse(), scorch.to_sparse(crd, "csf")):
        with pytest.raises(TypeError, match=r"crd\[1\] must be a dense \(strided\) tensor"):
            scorch.from_components((2, 3), "csr", pos=[None, pos], crd=[None, bad], values=vals)
    with pytest.raises(TypeError, match="values must be a dense"):
        scorch.from_components((2, 3), "csr", pos=[None, pos], crd=[None, crd],
                               values=vals.to_sparse())
    A = scorch.from_components((2, 3), "csr", pos=[None, pos],
                               crd=[None, (-crd)._neg_view()], values=(-vals)._neg_view())
    assert A.to_dense().tolist() == [[1., 0, 2], [0, 3, 0]]


def test_index_notation_given_to_einsum_points_to_kernel():
    with pytest.raises(ValueError, match="index notation goes through scorch.kernel"):
        scorch.einsum("C(i,j) = A(i,k) * B(k,j)", torch.ones(2, 2), torch.ones(2, 2))
