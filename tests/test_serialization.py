"""pickle, torch.save/torch.load (weights_only=True, the default) and copy.deepcopy of
SparseTensors: same format, shape, dtypes and arrays, and independent of the original."""
import copy
import io
import pickle

import pytest
import torch

import scorch
from scorch import Format

from conftest import (FLOAT_DTYPES, INDEX_DTYPES, assert_arrays_equal, assert_valid,
                      make_dense, seed_of, sparse_arrays)

CASES = [("csr", (7, 13)), ("coo", (13, 7)), ("csf", (3, 4, 5)), ("csc", (6, 4)),
         ("dense", (4, 6)), ("cd", (6, 4))]


def dtid(d):
    return str(d).replace("torch.", "")


def make(fmt, shape, dtype, index_dtype):
    ref = make_dense(shape, dtype, seed_of("ser", fmt, shape, dtype),
                     "empty_rows" if shape == (6, 4) else "random")
    A = scorch.to_sparse(ref, fmt, index_dtype=index_dtype)
    assert A.index_dtype == index_dtype
    return A, ref


def assert_same(B, A, ref):
    assert type(B) is scorch.SparseTensor
    assert B.format == A.format and str(B.format) == str(A.format)
    assert B.shape == A.shape
    assert B.dtype == A.dtype
    assert B.index_dtype == A.index_dtype
    assert B.nnz == A.nnz
    assert B.requires_grad == A.requires_grad
    assert_arrays_equal(sparse_arrays(B), sparse_arrays(A))
    assert_valid(B)
    assert torch.equal(B.to_dense(), ref)


def assert_independent(B, A, ref):
    """Writing B's arrays does not reach A."""
    assert B.values().data_ptr() != A.values().data_ptr() or A.nnz == 0
    with torch.no_grad():
        B.values().add_(1)
    for arr in B._pos + B._crd:
        if arr is not None:
            arr.zero_()
    assert torch.equal(A.to_dense(), ref)


def torch_round_trip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


param_grid = pytest.mark.parametrize(
    "fmt, shape", CASES, ids=[f"{f}-{'x'.join(map(str, s))}" for f, s in CASES])
dtypes = pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtid)
index_dtypes = pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtid)


@index_dtypes
@dtypes
@param_grid
def test_pickle(fmt, shape, dtype, index_dtype):
    A, ref = make(fmt, shape, dtype, index_dtype)
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        B = pickle.loads(pickle.dumps(A, protocol=protocol))
        assert_same(B, A, ref)
    assert_independent(B, A, ref)


@index_dtypes
@dtypes
@param_grid
def test_torch_save_load_default_weights_only(fmt, shape, dtype, index_dtype):
    A, ref = make(fmt, shape, dtype, index_dtype)
    B = torch_round_trip(A)                      # torch.load's default: weights_only=True
    assert_same(B, A, ref)
    assert_independent(B, A, ref)


@index_dtypes
@dtypes
@param_grid
def test_torch_save_load_explicit_weights_only(fmt, shape, dtype, index_dtype):
    A, ref = make(fmt, shape, dtype, index_dtype)
    assert_same(torch_round_trip(A, weights_only=True), A, ref)
    assert_same(torch_round_trip(A, weights_only=False), A, ref)


@index_dtypes
@dtypes
@param_grid
def test_deepcopy(fmt, shape, dtype, index_dtype):
    A, ref = make(fmt, shape, dtype, index_dtype)
    B = copy.deepcopy(A)
    assert B is not A
    assert_same(B, A, ref)
    assert_independent(B, A, ref)


def test_state_dict_like_container_round_trips():
    A, refA = make("csr", (7, 13), torch.float32, torch.int32)
    C, refC = make("csf", (3, 4, 5), torch.float64, torch.int64)
    state = {"adj": A, "t": C, "w": torch.ones(3), "shared": [A, A]}
    out = torch_round_trip(state)
    assert_same(out["adj"], A, refA)
    assert_same(out["t"], C, refC)
    assert torch.equal(out["w"], torch.ones(3))
    out = copy.deepcopy(state)
    assert out["shared"][0] is out["shared"][1] is out["adj"]   # deepcopy keeps identity
    assert_same(out["adj"], A, refA)


def test_requires_grad_survives():
    A, ref = make("csr", (7, 13), torch.float64, torch.int32)
    A = A.with_values(A.values().clone().requires_grad_())
    for B in (pickle.loads(pickle.dumps(A)), torch_round_trip(A), copy.deepcopy(A)):
        assert B.requires_grad
        assert torch.equal(B.to_dense(), ref)


def test_empty_tensor_round_trips():
    A = scorch.to_sparse(torch.zeros(0, 5), "csr", index_dtype=torch.int64)
    for B in (pickle.loads(pickle.dumps(A)), torch_round_trip(A), copy.deepcopy(A)):
        assert B.shape == (0, 5) and B.nnz == 0 and B.index_dtype == torch.int64
        assert torch.equal(B.to_dense(), torch.zeros(0, 5))


@pytest.mark.parametrize("fmt", [Format.parse("csr", 2), Format("c(nonunique)s"),
                                 Format("ccc", order=(2, 0, 1)), Format.parse("coo", 4)],
                         ids=repr)
def test_format_pickles(fmt):
    g = pickle.loads(pickle.dumps(fmt))
    assert g == fmt and hash(g) == hash(fmt)
    assert str(g) == str(fmt) and g.name == fmt.name and g.order == fmt.order
    assert copy.deepcopy(fmt) == fmt


@pytest.mark.parametrize("fmt,shape", [("csr", (7, 13)), ("coo", (13, 7)), ("csf", (3, 4, 5)),
                                       ("cd", (6, 4))])
def test_a_module_loads_its_sparse_buffer(fmt, shape):
    """Module.load_state_dict copies each buffer in place (Tensor.copy_): a SparseTensor
    buffer takes the saved one's entries, pattern included, in its own format, dtype and
    index width; products then read the new entries, transposed copies too."""
    class Model(torch.nn.Module):
        def __init__(self, x):
            super().__init__()
            self.register_buffer("adj", scorch.to_sparse(x, fmt))

    old = make_dense(shape, torch.float32, seed_of("sd-old", fmt), "random")
    new = make_dense(shape, torch.float64, seed_of("sd-new", fmt), "empty_rows")
    m, saved = Model(old), Model(new).double()
    X = torch.rand(shape[-1], 3)
    if len(shape) == 2:
        m.adj @ X                                             # kept state, then replaced
    buf = io.BytesIO()
    torch.save(saved.state_dict(), buf)
    buf.seek(0)
    A = m.adj
    m.load_state_dict(torch.load(buf))
    assert m.adj is A and A.format == scorch.to_sparse(old, fmt).format
    assert A.dtype == torch.float32 and A.index_dtype == torch.int32
    assert torch.equal(A.to_dense(), new.float())
    if len(shape) == 2:
        torch.testing.assert_close(A @ X, new.float() @ X)
        Y = torch.rand(shape[0], 2)
        torch.testing.assert_close(A.t() @ Y, new.float().t() @ Y)
    assert torch.equal(saved.adj.to_dense(), new)             # the source untouched


def test_copy_into_a_sparse_tensor():
    A = scorch.to_sparse(make_dense((5, 6), torch.float64, 1), "csr")
    d = make_dense((5, 6), torch.float64, 2, "empty_rows")
    A.copy_(d)                                                # from dense: its nonzeros
    assert torch.equal(A.to_dense(), d) and A.format.name == "csr"
    with pytest.raises(RuntimeError, match=r"shape \(6, 5\) differs"):
        A.copy_(torch.ones(6, 5, dtype=torch.float64))
    B = A.with_values(A.values().clone().requires_grad_())
    with pytest.raises(RuntimeError, match="requires grad cannot be written in place"):
        B.copy_(d)
    with torch.no_grad():
        B.copy_(2 * d)
    assert B.requires_grad and torch.equal(B.detach().to_dense(), 2 * d)
    with pytest.raises(NotImplementedError, match="Tensor.copy_"):
        torch.zeros(5, 6, dtype=torch.float64).copy_(A)


def test_copies_of_a_tensor_that_requires_grad_are_leaves_that_require_it():
    import copy
    import io
    import pickle
    A = scorch.to_sparse(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "csr").requires_grad_()
    buf = io.BytesIO()
    torch.save(A, buf)
    copies = [copy.deepcopy(A), pickle.loads(pickle.dumps(A))]
    for weights_only in (True, False):
        buf.seek(0)
        copies.append(torch.load(buf, weights_only=weights_only))
    for B in copies:
        assert B.requires_grad and B.values().requires_grad and B.values().is_leaf
        (B @ torch.ones(2, 1)).sum().backward()
        torch.testing.assert_close(B.grad.to_dense(), torch.eye(2))
    assert A.grad is None


def test_a_deepcopy_keeps_the_gradient():
    """copy.deepcopy of a leaf with a gradient copies the gradient too, as torch's does
    for a dense leaf (it came back None): a copy of its own."""
    import copy
    A = scorch.to_sparse(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "csr").requires_grad_()
    (A @ torch.ones(2, 1)).sum().backward()
    B = copy.deepcopy(A)
    torch.testing.assert_close(B.grad.to_dense(), torch.eye(2))
    B.grad.values().mul_(3)
    torch.testing.assert_close(A.grad.to_dense(), torch.eye(2))


def test_loaded_arrays_are_checked():
    """A file is input like any other: a bad position or coordinate array is an error at
    load (a SparseLinear's too), never a crash at first use."""
    from scorch._tensor import _rebuild

    fmt = scorch.Format.parse("csr", 2).as_tuple()
    good = (torch.tensor([0, 2, 3], dtype=torch.int32), torch.tensor([0, 2, 1], dtype=torch.int32))
    A = _rebuild((2, 3), fmt, [None, good[0]], [None, good[1]], torch.tensor([1., 2, 3]), False)
    assert A.to_dense().tolist() == [[1., 0, 2], [0, 3, 0]]
    for pos, crd in ((torch.tensor([0, 1000000, 3], dtype=torch.int32), good[1]),
                     (good[0], torch.tensor([0, 9, 1], dtype=torch.int32))):
        with pytest.raises((ValueError, IndexError)):
            _rebuild((2, 3), fmt, [None, pos], [None, crd], torch.tensor([1., 2, 3]), False)

    layer = scorch.nn.SparseLinear(64, 8, density=0.5)
    x = torch.randn(4, 64)
    y = layer(x)
    sd = layer.state_dict()
    sd["col_idx"][3] = 10 ** 8
    with pytest.raises(RuntimeError, match="out of range"):   # (at load: the shape check)
        layer.load_state_dict(sd)
    with pytest.raises(IndexError, match="out of range"):      # (torch copied the buffers)
        layer(x)
    fresh = scorch.nn.SparseLinear(64, 8, density=0.5)
    fresh.load_state_dict(scorch.nn.SparseLinear(64, 8, density=0.5).state_dict())
    fresh(x)                                             # a good state dict loads and runs
    assert y.shape == (4, 8)


def test_data_is_detached_and_takes_only_a_sparse_tensor():
    x = torch.tensor([[1., 0, 2], [0, 3, 0]])
    A = scorch.to_sparse(x, "csr").requires_grad_()
    d = A.data
    assert isinstance(d, scorch.SparseTensor) and not d.values().requires_grad
    assert d.values().data_ptr() == A.values().data_ptr()
    with pytest.raises(NotImplementedError, match="A.data"):
        A.data = torch.zeros(2, 3)
    assert A.shape == (2, 3)
    torch.testing.assert_close(A.to_dense().detach(), x)
    y = make_dense((5, 4), torch.float64, 3)
    B = scorch.to_sparse(y, "csc")
    A.data = B                                   # torch's set_data: A becomes B, shared
    assert A.shape == (5, 4) and A.dtype == torch.float64 and A.format.name == "csc"
    assert A.requires_grad and A.is_leaf and not B.requires_grad
    assert A.values().data_ptr() == B.values().data_ptr()
    X = torch.rand(4, 3, dtype=torch.float64)
    (A @ X).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), torch.ones(5, 3, dtype=torch.float64)
                               @ X.t() * (y != 0))
    with pytest.raises(RuntimeError, match="only floating point"):
        A.data = scorch.to_sparse(torch.eye(2, dtype=torch.int64), "csr")
    assert A.dtype == torch.float64                         # refused before any change


def test_module_conversions_of_a_sparse_parameter():
    """Module._apply (.double(), .to(), .cpu()) sets each parameter's .data."""
    x = make_dense((6, 5), torch.float32, 4)
    m = torch.nn.Module()
    m.A = torch.nn.Parameter(scorch.to_sparse(x, "csr"))
    A = m.A
    m.cpu()
    assert m.A is A and A.dtype == torch.float32
    m.double()
    assert m.A is A and A.dtype == torch.float64 and A.requires_grad
    X = torch.rand(5, 2, dtype=torch.float64)
    torch.testing.assert_close(A @ X, x.double() @ X)
    m.to(torch.float32)
    assert A.dtype == torch.float32 and torch.equal(A.detach().to_dense(), x)


def test_module_conversions_keep_the_grad_and_hooks():
    """Module._apply sets .data, then the grad's .data: a sparse parameter keeps its grad
    (converted with it) and its hooks, as a dense one does; a no-op .cpu() after backward
    used to raise (the grad was dropped) and a hook registered before was lost."""
    x = make_dense((4, 3), torch.float32, 6)
    X = torch.rand(3, 2)
    m = torch.nn.Module()
    m.A = torch.nn.Parameter(scorch.to_sparse(x, "csr"))
    m.A.register_hook(lambda g: g * 0)
    m.cpu()
    (m.A @ X).sum().backward()
    assert torch.equal(m.A.grad.to_dense(), torch.zeros(4, 3))
    m = torch.nn.Module()
    m.A = torch.nn.Parameter(scorch.to_sparse(x, "csr"))
    (m.A @ X).sum().backward()
    want = (torch.ones(4, 2) @ X.t()) * (x != 0)
    m.to(torch.float64)
    assert m.A.dtype == torch.float64 and m.A.grad.dtype == torch.float64
    torch.testing.assert_close(m.A.grad.to_dense(), want.double())
    m.cpu()
    torch.testing.assert_close(m.A.grad.to_dense(), want.double())
    A = m.A
    A.data = A.detach()
    assert A.grad is not None


def test_data_of_another_pattern_leaves_earlier_views_alone():
    """A.data = B of another pattern gives A a new values tensor; a view taken before
    (A.t(), sharing the old one) keeps the old pattern and values, as a dense view keeps
    the old storage."""
    x = make_dense((2, 3), torch.float32, 7)
    A = scorch.to_sparse(x, "csr").requires_grad_()
    T = A.t()
    A.data = scorch.to_sparse(torch.eye(3), "coo")
    assert torch.equal(A.detach().to_dense(), torch.eye(3))
    assert torch.equal(T.detach().to_dense(), x.t())


def test_data_of_the_same_pattern_leaves_views_and_graphs_alone():
    """A.data = B of A's pattern: views taken before (A.t(), with_values' Parameter) keep
    the old data, a graph built over A still runs backward after a no-op .cpu(), and a
    tensor made in inference mode takes B outside it (as a dense tensor does)."""
    d = torch.tensor([[1., 0, 2], [0, 3, 0]])
    A = scorch.to_sparse(d, "csr")
    V = A.t()
    A.data = A.double()
    assert V.dtype == torch.float32 and V._vals.dtype == torch.float32
    assert torch.equal(V.to_dense(), d.t())
    V.data = scorch.to_sparse(d.t() * 10, "csc")
    assert torch.equal(A.to_dense(), d.double())
    p = torch.nn.Parameter(torch.tensor([1., 2, 3]))
    W = scorch.to_sparse(d, "csr").with_values(p)
    W.data = scorch.to_sparse(d * 5, "csr")
    assert torch.equal(p.detach(), torch.tensor([1., 2, 3]))
    m = torch.nn.Module()
    m.P = torch.nn.Parameter(scorch.to_sparse(d, "csr"))
    x = torch.rand(4, 3, requires_grad=True)
    y = torch.nn.functional.linear(x, m.P)
    m.cpu()
    y.pow(2).sum().backward()
    torch.testing.assert_close(x.grad, 2 * (x.detach() @ d.t()) @ d)
    with torch.inference_mode():
        B = scorch.to_sparse(d, "csr")
    B.data = B.double()
    assert B.dtype == torch.float64 and torch.equal(B.to_dense(), d.double())


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
def test_copies_of_a_sparse_parameter_stay_parameters(how):
    """nn.Parameter(SparseTensor) and the attributes set on it survive deepcopy, pickling
    and torch.save (of the module), as a tensor subclass's __dict__ does in torch."""
    m = torch.nn.Module()
    m.W = torch.nn.Parameter(scorch.to_sparse(torch.eye(3), "csr"))
    m.W.no_decay = True
    if how == "deepcopy":
        c = copy.deepcopy(m)
    elif how == "pickle":
        c = pickle.loads(pickle.dumps(m))
    else:
        buf = io.BytesIO()
        torch.save(m, buf)
        buf.seek(0)
        c = torch.load(buf, weights_only=False)
    assert isinstance(c.W, torch.nn.Parameter) and c.W.requires_grad
    assert c.W.no_decay is True and c.W is not m.W
    assert "_is_param" not in vars(m.W.detach())
    c.load_state_dict(m.state_dict(), assign=True)   # (refused a plain SparseTensor)
    assert torch.equal(c.W.detach().to_dense(), torch.eye(3))
    buf = io.BytesIO()
    torch.save(m.W, buf)
    buf.seek(0)
    w = torch.load(buf, weights_only=True)
    assert isinstance(w, torch.nn.Parameter) and w.no_decay is True


def test_sparse_linear_checkpoint_of_another_shape_is_refused():
    """The layer's shape is in its state dict: a 4 x 6 layer's checkpoint does not load
    into a 4 x 8 layer of as many weights (nn.Linear's size mismatch); a checkpoint saved
    without it loads, its pattern checked against the layer's shape at load time."""
    g = lambda s: torch.Generator().manual_seed(s)
    narrow = scorch.nn.SparseLinear(6, 4, density=0.5, generator=g(1))
    wide = scorch.nn.SparseLinear(8, 4, density=0.375, generator=g(2))
    before = wide.col_idx.clone()
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        wide.load_state_dict(narrow.state_dict())
    assert torch.equal(wide.col_idx, before)
    old = {k: v for k, v in wide.state_dict().items() if k != "_extra_state"}
    with pytest.raises(RuntimeError, match="not one of a 4 x 6 weight"):
        narrow.load_state_dict(old)
    other = scorch.nn.SparseLinear(8, 4, density=0.375, generator=g(3))
    other.load_state_dict(old)
    x = torch.rand(2, 8)
    torch.testing.assert_close(other(x), wide(x))


def test_copy_keeping_the_pattern_writes_through_aliases():
    """A copy_ that keeps the pattern writes the values array, so a detached alias or a
    state_dict entry writes through to the tensor (torch.optim.swa_utils.AveragedModel
    averages a parameter so); another pattern replaces only the written tensor's arrays."""
    x = make_dense((5, 6), torch.float32, 5)
    m = torch.nn.Module()
    m.A = torch.nn.Parameter(scorch.to_sparse(x, "csr"))
    swa = torch.optim.swa_utils.AveragedModel(m)
    with torch.no_grad():
        m.A.copy_(scorch.to_sparse(3 * x, "csr"))
    swa.update_parameters(m)
    torch.testing.assert_close(swa.module.A.to_dense(), 3 * x)
    swa.update_parameters(m)
    torch.testing.assert_close(swa.module.A.to_dense(), 3 * x)
    with torch.no_grad():
        m.state_dict()["A"].copy_(scorch.to_sparse(5 * x, "coo"))
    torch.testing.assert_close(m.A.detach().to_dense(), 5 * x)
    X = torch.rand(6, 2)
    torch.testing.assert_close(m.A.t().t() @ X, 5 * x @ X)   # kept copies see the write
    alias = m.A.detach()
    y = make_dense((5, 6), torch.float32, 6, "empty_rows")
    with torch.no_grad():
        m.A.copy_(y)                                          # another pattern
    assert torch.equal(m.A.detach().to_dense(), y)
    torch.testing.assert_close(alias.to_dense(), 5 * x)       # the alias keeps the old one


def test_transposes_take_dims_in_range():
    A = scorch.to_sparse(torch.tensor([[1., 0, 2], [0, 3, 0]]), "csr")
    V = scorch.to_sparse(torch.tensor([1., 0, 2]), "csf")
    for call in (lambda: A.transpose(0, 3), lambda: A.permute(3, 0), lambda: A.permute(2, 3),
                 lambda: torch.swapaxes(A, 0, 5), lambda: V.transpose(0, 1)):
        with pytest.raises(IndexError, match="out of range"):
            call()
    with pytest.raises(RuntimeError, match="mT"):
        V.mT
    assert A.transpose(-1, -2).to_dense().tolist() == [[1., 0], [0, 3], [2, 0]]
